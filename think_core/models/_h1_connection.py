"""One HTTP/1.1 client connection: an asyncio ``Protocol`` fed to httptools' C response parser.

A live model stream is one network read per event, so what a read costs is what an event costs.
Here a read is ``data_received`` → the C parser → the body bytes appended to a list → the one
waiting future woken; the reader takes everything that arrived since its last read in one piece.
No stream reader, no task per connection, no timer per read: the read timeout is one timer per
connection, re-armed only when it fires early (see :meth:`H1Connection._check_idle`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol, cast

import httptools
import httpx

__all__ = ["H1Connection", "ResponseHead"]

_HIGH_WATER = 1 << 20
"""Bytes buffered unread before the socket is paused: a slow reader must not let a fast server
fill this process's memory."""


class Releaser(Protocol):
    """Who gets the connection back when a response is done with it (the pool)."""

    def release(self, connection: H1Connection) -> None: ...


class ResponseHead:
    """Status line and headers of one response, as the parser delivered them."""

    __slots__ = ("headers", "reason", "status")

    def __init__(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers


class H1Connection(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection carrying one request/response at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: tuple[bytes, bytes, int]) -> None:
        self.loop = loop
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head: asyncio.Future[ResponseHead] | None = None
        self._body: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._complete = False
        self._keep_alive = False
        self._until_eof = False  # neither content-length nor chunked: the body ends with the connection
        self._error: httpx.TransportError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._read_timeout: float | None = None
        self._wait_started = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._head_only = False
        self._request_close = False

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport, though not always an asyncio.Transport subclass (uvloop's are not)
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"invalid HTTP response: {exc}"))
            self.abort()  # whatever follows cannot be framed: the connection is unusable
            return
        if self._body or self._complete:
            self._wake()
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost tells the reader

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._until_eof and exc is None:
            self._complete = True
            self._wake()
        elif self._head is not None and not self._head.done():
            self._fail(httpx.RemoteProtocolError("Server disconnected without sending a response."))
        elif not self._complete:
            message = "peer closed connection without sending complete message body"
            self._fail(httpx.ReadError(f"{message}: {exc}") if exc else httpx.RemoteProtocolError(message))
        if self._writable is not None and not self._writable.done():
            self._writable.set_exception(httpx.WriteError(str(exc) if exc else "connection closed"))

    def pause_writing(self) -> None:
        self._writable = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # -- httptools callbacks ---------------------------------------------------------------------

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:  # 100 Continue & co.: not the answer, which follows on the same connection
            self._reason, self._headers = b"", []
            return
        chunked = length = False
        for name, value in self._headers:
            lower = name.lower()
            if lower == b"content-length":
                length = True
            elif lower == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        bodiless = self._head_only or status in (204, 304)
        self._until_eof = not (chunked or length or bodiless)
        if bodiless:
            self._complete = True
        if self._head is not None and not self._head.done():
            self._head.set_result(ResponseHead(status, self._reason, self._headers))

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._buffered += len(body)

    def on_message_complete(self) -> None:
        if self._parser.get_status_code() >= 200:
            self._complete = True
            self._keep_alive = self._parser.should_keep_alive()  # the parser forgets it once reset

    # -- the request -----------------------------------------------------------------------------

    async def send(self, head: bytes, body: httpx.AsyncByteStream | bytes, chunked: bool,
                   timeouts: dict[str, float | None], head_only: bool) -> ResponseHead:
        """Write the request and wait for the response's status line and headers."""
        assert self.transport is not None
        self._parser = httptools.HttpResponseParser(self)
        self._reason, self._headers, self._body, self._buffered = b"", [], [], 0
        self._complete = self._until_eof = self._keep_alive = False
        self._head_only = head_only
        self._read_timeout = timeouts.get("read")
        self._head = self.loop.create_future()
        if isinstance(body, bytes):
            self.transport.write(head + body)
        else:
            self.transport.write(head)
            await self._write_stream(body, chunked, timeouts.get("write"))
        if self._error is not None:
            raise self._error
        return await self._wait(self._head)

    async def _write_stream(self, body: httpx.AsyncByteStream, chunked: bool, timeout: float | None) -> None:
        assert self.transport is not None
        async for part in body:
            if not part:
                continue
            self.transport.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
            if self._writable is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(self._writable), timeout)
                except TimeoutError:
                    raise httpx.WriteTimeout("timed out writing the request body") from None
        if chunked:
            self.transport.write(b"0\r\n\r\n")

    async def _wait(self, future: asyncio.Future[ResponseHead]) -> ResponseHead:
        self._arm()
        try:
            return await future
        finally:
            self._wait_started = -1.0

    def _arm(self) -> None:
        self._wait_started = self.loop.time()
        if self._timer is None and self._read_timeout is not None:
            self._timer = self.loop.call_at(self._wait_started + self._read_timeout, self._check_idle)

    def _check_idle(self) -> None:
        """The connection's one read-timer: a reader waiting since ``read`` seconds fails; one
        that is not waiting, or began waiting later, gets the timer re-armed for its deadline."""
        self._timer = None
        if self._read_timeout is None or self.closed:
            return
        waiting = self._wait_started >= 0 and (self._waiter is not None or (self._head is not None and not self._head.done()))
        if not waiting:
            return  # armed again at the next wait
        deadline = self._wait_started + self._read_timeout
        if self.loop.time() >= deadline:
            self._fail(httpx.ReadTimeout("timed out waiting for the server"))
            self.abort()
        else:
            self._timer = self.loop.call_at(deadline, self._check_idle)

    # -- the response body -----------------------------------------------------------------------

    async def body(self) -> AsyncIterator[bytes]:
        """Everything that arrived since the last read, one piece per wake."""
        while True:
            if self._body:
                parts, self._body, self._buffered = self._body, [], 0
                if self._paused and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                yield parts[0] if len(parts) == 1 else b"".join(parts)
            elif self._complete:
                return
            elif self._error is not None:
                raise self._error
            else:
                self._waiter = self.loop.create_future()
                self._arm()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
                    self._wait_started = -1.0

    @property
    def complete(self) -> bool:
        """The current response's end has been parsed."""
        return self._complete

    @property
    def reusable(self) -> bool:
        """Whole response read, and both sides keep the connection open."""
        return (self._complete and not self._until_eof and not self.closed and not self._request_close
                and self._error is None and self._keep_alive)

    def done(self, releaser: Releaser, request_close: bool) -> None:
        """The response is closed: reuse the connection if it was read to the end, else drop it."""
        self._request_close = request_close
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.reusable:
            self.abort()
        self._head = None
        self.idle_since = self.loop.time()
        releaser.release(self)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: httpx.TransportError) -> None:
        if self._error is None:
            self._error = error
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
            self._head.exception()  # retrieved: a caller already gone must not log "never retrieved"
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
