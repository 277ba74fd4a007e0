"""The HTTP transport under the providers' ``httpx`` clients.

httpx stays the client API, but its own transport stack (httpcore → h11 → anyio) costs several
times a raw asyncio reader per network read, and a live model stream is one read per event: at a
few hundred concurrent streams that stack, not think, fills a core (``bench/live_streams.py``).
When the ``fast`` extra is installed (``httpx-aiohttp``), the clients think creates itself run
over aiohttp's connection handling instead, which reads a chunked event stream at about half
the cost. ``THINK_HTTP_TRANSPORT=httpx`` keeps httpx's own transport (to compare, or to rule the
other one out); a client passed to a model (``client=``) is always used as it is. With a proxy
set in the environment (``HTTPS_PROXY``, ...), httpx's transport is kept too: httpx applies the
environment's proxies only to its own transport.
"""

from __future__ import annotations

import importlib.util
import os
import ssl
import urllib.request

import httpx

__all__ = ["CLIENT_LIMITS", "TRANSPORT_ENV", "aiohttp_available", "new_client"]

CLIENT_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
"""The official SDKs' pool size. httpx's default (100 connections) would hold the 101st
concurrent stream of a process until another one ends, and a server holds hundreds."""

TRANSPORT_ENV = "THINK_HTTP_TRANSPORT"


def aiohttp_available() -> bool:
    """True when the aiohttp transport is installed and not switched off by the environment."""
    if os.environ.get(TRANSPORT_ENV, "").strip().lower() == "httpx":
        return False
    if any(scheme in ("http", "https", "all") for scheme in urllib.request.getproxies()):
        return False
    return importlib.util.find_spec("httpx_aiohttp") is not None


def new_client(timeout: httpx.Timeout, verify: ssl.SSLContext) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` over the cheapest transport installed."""
    if aiohttp_available():
        from httpx_aiohttp import AiohttpTransport

        transport = AiohttpTransport(verify=verify, limits=CLIENT_LIMITS)
        return httpx.AsyncClient(timeout=timeout, transport=transport)
    return httpx.AsyncClient(timeout=timeout, verify=verify, limits=CLIENT_LIMITS)
