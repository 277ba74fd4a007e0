"""Optional bearer-token authentication.

One shared token (``THINK_API_TOKEN`` or ``create_app(api_token=...)``) guards the API and the
WebSocket. Browsers cannot set headers on a WebSocket, so the socket also accepts the token in
the ``token`` query parameter. Comparison is constant-time.
"""

from __future__ import annotations

import hmac

from starlette.requests import HTTPConnection


def bearer_token(connection: HTTPConnection, *, allow_query: bool) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if allow_query:
        return connection.query_params.get("token") or None
    return None


def is_authorized(connection: HTTPConnection, expected: str | None, *, allow_query: bool = False) -> bool:
    """True when no token is configured or the request presents the configured one."""
    if not expected:
        return True
    given = bearer_token(connection, allow_query=allow_query)
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
