"""The test toolkit: what several test folders build with.

* :mod:`tests.support.agents`: ``make_agent``, a factory of ``Think`` agents that the suite's
  ``conftest.py`` closes after every test.
* :mod:`tests.support.wire`: provider streams as OpenAI Chat Completions and Anthropic Messages
  send them, models pointed at a loopback server, a request and a collector of its events.
* :mod:`tests.support.gemini`, :mod:`tests.support.responses`: the same for Gemini and for
  the OpenAI Responses API.
* :mod:`tests.support.web`: what a browser client sends to the server (UI messages, WebSocket
  chat requests) and reads back (the text of a UI message stream or of a message, a history's
  roles).
* :mod:`tests.support.http_chat`: the AI SDK's HTTP chat (a server and a client on it, the
  body ``DefaultChatTransport`` posts, its SSE stream read back with every chunk's shape checked).
* :mod:`tests.support.ws`: the chat WebSocket (a server, a cf_agent_* client on it, its frames
  read past the hook-timeline frames).
* :mod:`tests.support.browser`: headless Chromium for the page tests.
* :mod:`tests.support.tools`: the tools the server tests offer the model.
* :mod:`tests.support.scripted`: the tool results a ``ScriptedModel`` was sent.
* :mod:`tests.support.logs`: the engine's log events as ``caplog`` holds them.
* :mod:`tests.support.messages`, :mod:`tests.support.stores`: messages as the store tests
  write them, and a store seen through the ``Store`` protocol alone (the contract suite's).
* :mod:`tests.support.crash`: the crash worker (``bench/crash_worker.py``) killing itself at a
  marked point, what its tools did and the answers it stored.
* :mod:`tests.support.cli`, :mod:`tests.support.venv`: the ``think`` command run as a user runs
  it, and fresh virtual environments for the packaging tests (their fixtures ``home`` and
  ``dependencies`` are in ``tests/cli/conftest.py``).
* :mod:`tests.support.net`: a local port nothing listens on.
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
