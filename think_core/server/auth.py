"""Optional bearer-token authentication.

One shared token (``THINK_API_TOKEN`` or ``create_app(api_token=...)``) guards the API and the
WebSocket. HTTP clients send ``Authorization: Bearer <token>``. Browsers cannot set headers on
a WebSocket, so the socket also takes the token

- as the ``token`` query parameter (``/agents/think/s?token=…``; what Cloudflare's ``agents``
  client sends), or
- as a ``Sec-WebSocket-Protocol`` entry ``bearer.<token>`` for clients that cannot touch the
  URL: ``new WebSocket(url, ["think", "bearer." + token])``. The server answers with the other
  offered protocol (``think``), never with the credential, so a browser, which insists on an
  answer once it offered protocols, must offer one besides the token.

Comparison is constant-time.
"""

from __future__ import annotations

import hmac

from starlette.requests import HTTPConnection

TOKEN_SUBPROTOCOL_PREFIX = "bearer."


def offered_subprotocols(connection: HTTPConnection) -> list[str]:
    """The ``Sec-WebSocket-Protocol`` entries, in the client's order."""
    offered: list[str] = []
    for header in connection.headers.getlist("sec-websocket-protocol"):
        offered.extend(p.strip() for p in header.split(",") if p.strip())
    return offered


def subprotocol_token(connection: HTTPConnection) -> str | None:
    for protocol in offered_subprotocols(connection):
        if protocol.lower().startswith(TOKEN_SUBPROTOCOL_PREFIX) and len(protocol) > len(TOKEN_SUBPROTOCOL_PREFIX):
            return protocol[len(TOKEN_SUBPROTOCOL_PREFIX):]
    return None


def accepted_subprotocol(connection: HTTPConnection) -> str | None:
    """The protocol to accept the socket with: the first offered one that is not a credential."""
    for protocol in offered_subprotocols(connection):
        if not protocol.lower().startswith(TOKEN_SUBPROTOCOL_PREFIX):
            return protocol
    return None


def bearer_token(connection: HTTPConnection, *, allow_query: bool, allow_subprotocol: bool = False) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if allow_query and connection.query_params.get("token"):
        return connection.query_params["token"]
    if allow_subprotocol:
        return subprotocol_token(connection)
    return None


def is_authorized(
    connection: HTTPConnection, expected: str | None, *, allow_query: bool = False, allow_subprotocol: bool = False
) -> bool:
    """True when no token is configured or the request presents the configured one."""
    if not expected:
        return True
    given = bearer_token(connection, allow_query=allow_query, allow_subprotocol=allow_subprotocol)
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
