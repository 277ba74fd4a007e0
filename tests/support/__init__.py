"""The test toolkit: what several test folders build with.

* :mod:`tests.support.agents`: ``make_agent``, a factory of ``Think`` agents that the suite's
  ``conftest.py`` closes after every test.
* :mod:`tests.support.wire`: provider streams as OpenAI Chat Completions and Anthropic Messages
  send them, models pointed at a loopback server, a request and a collector of its events.
* :mod:`tests.support.web`: what a browser client sends to the server (UI messages, WebSocket
  chat requests) and reads back (the text of a UI message stream).
* :mod:`tests.support.contexts`: hook contexts built by hand, for calling a plugin's hook
  directly.
* :mod:`tests.loopback` (the real-socket HTTP server) and :mod:`tests.recorder` (a plugin that
  records every hook) predate the package and stay where the suite imports them from.
"""
