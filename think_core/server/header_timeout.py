"""uvicorn's HTTP/1.1 protocol with a time limit on a request's headers.

uvicorn's keep-alive timer is cancelled by every byte that arrives, so a client that sends its
request headers a byte at a time holds a socket (and a file descriptor) for as long as it likes;
a few hundred such clients exhaust the server's. Here a request whose headers are not complete
within :data:`HEADER_TIMEOUT` seconds of their first byte has its connection closed. A WebSocket
the connection was upgraded to, and a request being answered, are never affected.

The limit is laid over either of uvicorn's HTTP/1.1 implementations (they share the attributes
it uses): ``httptools`` (C, llhttp) when it is installed — the ``fast`` extra — else ``h11``
(pure Python). Every event a chat streams back is one ``send`` of the response, and h11's costs
several times httptools' per send: with a few hundred live chats that is most of the server's
own CPU per event (``bench/live_serve.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEADER_TIMEOUT", "HeaderDeadline", "http_protocol", "with_header_timeout"]

#: Seconds a request's headers may take to arrive whole (``think serve --header-timeout``).
HEADER_TIMEOUT = 10.0

#: ``think serve --http``: ``auto`` is httptools when it is installed, else h11.
Implementation = Literal["auto", "httptools", "h11"]


class HeaderDeadline:
    """Closes a connection whose request headers are overdue: mixed into one of uvicorn's
    HTTP/1.1 protocols (before it in the bases, so its hooks run around the protocol's)."""

    header_timeout = HEADER_TIMEOUT
    # The protocol's, which this mixin only reads (uvicorn sets them).
    cycle: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    logger: Any

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
        super().data_received(data)  # type: ignore[misc]
        # The headers are in: the request is being answered, or the connection was upgraded to
        # a WebSocket (its protocol took the transport over). The timer is dropped then, not
        # left to fire: it would keep this protocol, its parser and the request alive until it
        # did (~2.5 KiB per WebSocket for its first seconds, a reconnect storm's worth at once).
        if self._headers_due is not None and (
            not self._between_requests() or self.transport.get_protocol() is not self
        ):
            self._headers_due.cancel()
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
        super().connection_lost(exc)  # type: ignore[misc]


def http_protocol(implementation: Implementation = "auto") -> type[Any]:
    """uvicorn's HTTP/1.1 protocol class for ``implementation`` (``auto``: httptools when it
    imports, else h11). ``httptools`` without httptools installed raises ``ImportError``."""
    if implementation != "h11":
        try:
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # needs httptools
        except ImportError:
            if implementation == "httptools":
                raise
        else:
            return HttpToolsProtocol
    return H11Protocol


def with_header_timeout(seconds: float, implementation: Implementation = "auto") -> type[Any]:
    """The protocol class with its own limit (uvicorn's ``http=`` takes a class)."""
    base = http_protocol(implementation)
    return type(f"HeaderTimeout{base.__name__}", (HeaderDeadline, base), {"header_timeout": seconds})
