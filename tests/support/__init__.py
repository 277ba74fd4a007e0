"""The test toolkit: what several test folders build with.

* :mod:`tests.support.agents`: ``make_agent``, a factory of ``Think`` agents that the suite's
  ``conftest.py`` closes after every test.
* :mod:`tests.support.wire`: provider streams as OpenAI Chat Completions and Anthropic Messages
  send them, models pointed at a loopback server, a request and a collector of its events.
* :mod:`tests.support.web`: what a browser client sends to the server (UI messages, WebSocket
  chat requests) and reads back (the text of a UI message stream or of a message, a history's
  roles).
* :mod:`tests.support.ws`: a chat WebSocket's frames read past the hook-timeline frames.
* :mod:`tests.support.tools`: the tools the server tests offer the model.
* :mod:`tests.support.scripted`: the tool results a ``ScriptedModel`` was sent.
* :mod:`tests.support.logs`: the engine's log events as ``caplog`` holds them.
* :mod:`tests.support.postgres`: the test PostgreSQL server, and the ``db`` fixture (a SQLite
  file or a fresh PostgreSQL database) the suite's ``conftest.py`` offers every test.
* :mod:`tests.support.serve`, :mod:`tests.support.ledger_tools`,
  :mod:`tests.support.ledger_model`: ``think serve`` as a child process, the ledger tools it
  runs in crash tests, and the loopback model that calls them.
* :mod:`tests.support.contexts`: hook contexts built by hand, for calling a plugin's hook
  directly.
* :mod:`tests.loopback` (the real-socket HTTP server) and :mod:`tests.recorder` (a plugin that
  records every hook) predate the package and stay where the suite imports them from.
"""
