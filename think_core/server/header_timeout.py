"""uvicorn's HTTP/1.1 protocol with a time limit on a request's headers.

uvicorn's keep-alive timer is cancelled by every byte that arrives, so a client that sends its
request headers a byte at a time holds a socket (and a file descriptor) for as long as it likes;
a few hundred such clients exhaust the server's. Here a request whose headers are not complete
within :data:`HEADER_TIMEOUT` seconds of their first byte has its connection closed. A WebSocket
the connection was upgraded to, and a request being answered, are never affected.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEADER_TIMEOUT", "HeaderTimeoutProtocol"]

#: Seconds a request's headers may take to arrive whole (``think serve --header-timeout``).
HEADER_TIMEOUT = 10.0


class HeaderTimeoutProtocol(H11Protocol):
    """:class:`H11Protocol` closing connections whose request headers are overdue."""

    header_timeout = HEADER_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headers_due: asyncio.TimerHandle | None = None

    def _between_requests(self) -> bool:
        cycle = self.cycle
        return cycle is None or bool(cycle.response_complete)

    def data_received(self, data: bytes) -> None:
        if self._headers_due is None and self._between_requests():
            # The first bytes of a request: its headers are due by then.
            self._headers_due = self.loop.call_later(self.header_timeout, self._headers_overdue)
        super().data_received(data)
        if self._headers_due is not None and not self._between_requests():
            self._headers_due.cancel()  # the headers are in: the request is being answered
            self._headers_due = None

    def _headers_overdue(self) -> None:
        self._headers_due = None
        transport = self.transport
        if self._between_requests() and transport.get_protocol() is self and not transport.is_closing():
            self.logger.info("closing a connection whose request headers took over %g s", self.header_timeout)
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None
        super().connection_lost(exc)


def with_header_timeout(seconds: float) -> type[HeaderTimeoutProtocol]:
    """The protocol class with its own limit (uvicorn's ``http=`` takes a class)."""
    return type("HeaderTimeoutProtocol", (HeaderTimeoutProtocol,), {"header_timeout": seconds})
