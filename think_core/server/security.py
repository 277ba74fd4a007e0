"""Who may talk to the server from a browser: ``Origin`` and ``Host`` checks, and the headers
every response carries.

A web page the user happens to visit can reach a server on ``localhost``: it can open a
WebSocket to it (no CORS on sockets), send "simple" cross-origin POSTs (no preflight) and,
by rebinding its own DNS name to 127.0.0.1, read the answers as if they were same-origin.
The checks here close those doors before any route runs, for HTTP and WebSocket alike:

- a request carrying ``Origin`` is served only when that origin is the server's own (the
  scheme and ``Host`` the request reached it with) or one of ``allowed_origins``;
  ``Origin: null`` (sandboxed frames, ``file:`` pages) only when ``"null"`` is listed;
  ``"*"`` allows every real origin. Requests without ``Origin`` (curl, SDKs) are not browsers
  acting for a page and pass;
- ``Host`` is checked when the server listens on a loopback address or ``allowed_hosts`` is
  given: ``localhost``, ``127.0.0.1`` and ``[::1]`` (any port) plus the listed names
  (``*.example.com`` matches subdomains, ``*`` anything). A rebinding attack needs a name of
  its own, so it ends here.

A refusal is a 403 with the usual JSON error body; on a WebSocket it is the handshake's
answer, so the socket is never accepted.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .frames import error_body

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
DEFAULT_PORTS = {"http": 80, "https": 443}
WS_POLICY_VIOLATION = 1008

#: The chat page loads its script and styles from this server and talks only to it.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
#: Everything else (JSON, event streams, the page's assets) is data, never a document.
DEFAULT_CSP = "default-src 'none'; frame-ancestors 'none'"
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (``127.0.0.0/8``, ``::1``)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def canonical_origin(value: str) -> str | None:
    """``value`` serialized as a browser sends ``Origin`` (lowercase, default port dropped),
    or ``None`` when it is not an http(s) origin."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in DEFAULT_PORTS or not host or parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    return f"{scheme}://{netloc}"


def host_name(host_header: str) -> str | None:
    """The name in a ``Host`` header (lowercase, IPv6 without brackets); ``None`` if malformed."""
    try:
        parts = urlsplit("//" + host_header)
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return None
    if parts.path or parts.query or parts.fragment or parts.username is not None:
        return None
    return parts.hostname or None


@dataclass(frozen=True)
class AccessPolicy:
    """The ``Origin`` and ``Host`` rules of one app (see the module docstring)."""

    origins: frozenset[str]
    any_origin: bool
    null_origin: bool
    hosts: frozenset[str] | None  # None: any Host

    @classmethod
    def build(cls, allowed_origins: Iterable[str], allowed_hosts: Iterable[str] | None, bind_host: str | None) -> AccessPolicy:
        origins: set[str] = set()
        listed = list(allowed_origins)
        for entry in listed:
            if entry in ("*", "null"):
                continue
            origin = canonical_origin(entry)
            if origin is None:
                raise ValueError(f"not an origin (scheme://host[:port]): {entry!r}")
            origins.add(origin)
        hosts: frozenset[str] | None = None
        names = [h.strip().lower() for h in allowed_hosts or ()]
        if "*" not in names and (allowed_hosts is not None or (bind_host is not None and is_loopback(bind_host))):
            hosts = LOOPBACK_HOSTS | {n.strip("[]") for n in names}
        return cls(frozenset(origins), "*" in listed, "null" in listed, hosts)

    @property
    def cors_origins(self) -> list[str]:
        """The origins a browser may read responses from (beside the server's own)."""
        return ["*"] if self.any_origin else sorted(self.origins | ({"null"} if self.null_origin else set()))

    def host_allowed(self, name: str) -> bool:
        if self.hosts is None or name in self.hosts:
            return True
        return any(p.startswith("*.") and name.endswith(p[1:]) for p in self.hosts)

    def refusal(self, scope: Scope) -> tuple[str, str] | None:
        """``(message, error type)`` when the request must be refused, else ``None``."""
        headers = Headers(scope=scope)
        host_header = headers.get("host", "")
        if self.hosts is not None:
            name = host_name(host_header)
            if name is None or not self.host_allowed(name):
                return f"Host {host_header!r} is not allowed (see --allowed-host)", "forbidden_host"
        origin = headers.get("origin")
        if origin is None:
            return None
        if origin == "null":
            return (None if self.null_origin else ("Origin 'null' is not allowed", "forbidden_origin"))
        canonical = canonical_origin(origin)
        scheme = {"ws": "http", "wss": "https"}.get(scope["scheme"], scope["scheme"])
        own = canonical_origin(f"{scheme}://{host_header}") if host_header else None
        if canonical is not None and (canonical == own or self.any_origin or canonical in self.origins):
            return None
        return f"Origin {origin!r} is not allowed (see --allow-origin)", "forbidden_origin"


class AccessGuard:
    """Pure ASGI middleware applying an :class:`AccessPolicy` to HTTP and WebSocket scopes.

    Like :class:`SecurityHeaders` it hands a request it lets through to the app without a
    coroutine of its own (it returns the app's awaitable): a WebSocket holds every middleware
    frame it passed through for as long as it is open."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app = app
        self.policy = policy

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        refusal = self.policy.refusal(scope) if scope["type"] in ("http", "websocket") else None
        if refusal is None:
            return self.app(scope, receive, send)
        return self._refuse(refusal, scope, receive, send)

    async def _refuse(self, refusal: tuple[str, str], scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(error_body(*refusal), status_code=403)
        if scope["type"] == "http" or "websocket.http.response" in scope.get("extensions", {}):
            await response(scope, receive, send)  # a WebSocket handshake answered with the 403
        else:
            await send({"type": "websocket.close", "code": WS_POLICY_VIOLATION})  # a bare 403


class SecurityHeaders:
    """Adds ``nosniff``, ``no-referrer``, ``DENY`` framing and a default CSP to every HTTP
    response that does not set its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http":
            return self.app(scope, receive, send)  # (no frame of its own kept for a WebSocket's life)
        return self._with_headers(scope, receive, send)

    async def _with_headers(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in {**SECURITY_HEADERS, "content-security-policy": DEFAULT_CSP}.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
