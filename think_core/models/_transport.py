"""The HTTP transport under the providers' ``httpx`` clients.

httpx stays the client API, but its own transport stack (httpcore → h11 → anyio) costs several
times a raw asyncio reader per network read, and a live model stream is one read per event: at a
few hundred concurrent streams that stack, not think, fills a core (``bench/live_streams.py``).
When the ``fast`` extra is installed (``httptools``), the clients think creates itself run over
think's own transport (:class:`~._h1_transport.ThinkTransport`: asyncio and httptools' C
parser), which reads a chunked event stream at about a third of httpx's own cost.
``THINK_HTTP_TRANSPORT=httpx`` keeps httpx's own transport (to compare, or to rule the other one
out; ``think`` insists on think's); a client passed to a model (``client=``) is always used as it
is. With a proxy set in the environment (``HTTPS_PROXY``, ...), httpx's transport is kept too:
httpx applies the environment's proxies only to its own transport.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import ssl
import sys
import urllib.request

import httpx

from ..errors import ConfigurationError

__all__ = ["CLIENT_LIMITS", "TRANSPORT_ENV", "TRANSPORTS", "new_client", "transport_choice"]

CLIENT_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
"""The official SDKs' pool size. httpx's default (100 connections) would hold the 101st
concurrent stream of a process until another one ends, and a server holds hundreds."""

TRANSPORT_ENV = "THINK_HTTP_TRANSPORT"
TRANSPORTS = ("think", "httpx")


_PROXY_VARIABLES = tuple(f"{scheme}_proxy" for scheme in ("http", "https", "all"))


def _proxy_configured() -> bool:
    """Whether an HTTP(S) proxy is set. On POSIX the proxies come from the environment alone, and
    six look-ups replace ``urllib.request.getproxies()``, which decodes every variable of the
    environment (a tenth of a millisecond per model call, paid by each client think makes)."""
    if os.name != "posix" or sys.platform == "darwin":  # also the system's settings (registry, scutil)
        return any(scheme in ("http", "https", "all") for scheme in urllib.request.getproxies())
    environ = os.environ
    return any(environ.get(name) or environ.get(name.upper()) for name in _PROXY_VARIABLES)


@functools.cache
def _httptools_installed() -> bool:
    return importlib.util.find_spec("httptools") is not None


def transport_choice() -> str:
    """``"think"`` or ``"httpx"``: the transport :func:`new_client` builds clients on."""
    wanted = os.environ.get(TRANSPORT_ENV, "").strip().lower()
    if wanted not in ("", *TRANSPORTS):
        raise ConfigurationError(f"{TRANSPORT_ENV}={wanted!r}: expected one of {', '.join(TRANSPORTS)}")
    if wanted == "httpx" or _proxy_configured():
        return "httpx"
    if not _httptools_installed():
        if wanted == "think":
            raise ConfigurationError(f"{TRANSPORT_ENV}=think needs httptools: pip install 'think-agent[fast]'")
        return "httpx"
    return "think"


def new_client(timeout: httpx.Timeout, verify: ssl.SSLContext) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` over the cheapest transport installed."""
    if transport_choice() == "think":
        from ._h1_transport import ThinkTransport

        return httpx.AsyncClient(timeout=timeout, transport=ThinkTransport(verify=verify, limits=CLIENT_LIMITS))
    return httpx.AsyncClient(timeout=timeout, verify=verify, limits=CLIENT_LIMITS)
