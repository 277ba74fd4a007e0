"""think's own ``httpx`` transport: HTTP/1.1 over asyncio with a per-origin keep-alive pool.

httpx stays the client API (``httpx.AsyncClient(transport=ThinkTransport(...))``); underneath,
each connection is an :class:`~._h1_connection.H1Connection` (an asyncio ``Protocol`` fed to
httptools' C parser), so a streamed event costs one parse and one future wake, where httpx's own
stack (httpcore, h11, anyio) or aiohttp's (through httpx-aiohttp) adds several layers per read.

Pooling follows ``httpx.Limits``: at most ``max_connections`` open, at most
``max_keepalive_connections`` kept idle, each idle for at most ``keepalive_expiry`` seconds; a
request beyond the limit waits for a connection up to the ``pool`` timeout. A response not read
to its end (closed early, failed, ``Connection: close``) closes its connection instead of
returning it. Content-Encoding is decoded above the transport, by httpx, as with any transport.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator

import httpx

from ._h1_connection import H1Connection

__all__ = ["ThinkTransport"]

Origin = tuple[bytes, bytes, int]
_DEFAULT_PORTS = {b"http": 80, b"https": 443}


class _Waiter:
    """A request queued for a connection: it gets a reusable one to its origin, or a free slot
    (``None``) to open one."""

    __slots__ = ("future", "origin")

    def __init__(self, origin: Origin, future: asyncio.Future[H1Connection | None]) -> None:
        self.origin = origin
        self.future = future


class _ResponseBody(httpx.AsyncByteStream):
    """The response's byte stream: the connection's reads as they are (no extra layer), and on
    close the connection back to the pool or dropped."""

    def __init__(self, connection: H1Connection, pool: ThinkTransport, request_close: bool) -> None:
        self._connection = connection
        self._pool = pool
        self._request_close = request_close
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:  # the connection's generator itself, not a wrapper
        return self._connection.body()

    def direct_reads(self) -> AsyncIterator[bytes]:
        """The connection's reads, for a reader that takes them from here rather than through
        httpx's ``aiter_raw`` (two generator layers per read; see ``models._http.body_reads``)."""
        return self._connection.body()

    @property
    def complete(self) -> bool:
        """Whether the whole response has arrived (whatever of it is still unread)."""
        return self._connection.complete

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._connection.done(self._pool, self._request_close)


class ThinkTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` for HTTP/1.1 (``http://`` and ``https://``), no proxies."""

    def __init__(self, *, verify: ssl.SSLContext, limits: httpx.Limits) -> None:
        self._ssl = verify
        self._max = limits.max_connections
        self._max_idle = limits.max_keepalive_connections
        self._expiry = limits.keepalive_expiry
        self._idle: dict[Origin, list[H1Connection]] = {}
        self._idle_count = 0
        self._open = 0  # connections that hold a slot: busy, idle or being opened
        self._waiters: deque[_Waiter] = deque()
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        scheme = url.raw_scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        origin = (scheme, url.raw_host, url.port or _DEFAULT_PORTS[scheme])
        timeouts = request.extensions.get("timeout", {})
        connection = await self._acquire(origin, request, timeouts)
        head, body, chunked = _serialize(request)
        request_close = any(n.lower() == b"connection" and v.lower() == b"close" for n, v in request.headers.raw)
        try:
            response_head = await connection.send(head, body, chunked, timeouts, request.method == "HEAD")
        except BaseException:
            connection.abort()
            self.release(connection)
            raise
        return httpx.Response(
            response_head.status,
            headers=response_head.headers,
            stream=_ResponseBody(connection, self, request_close),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": response_head.reason},
        )

    # -- the pool --------------------------------------------------------------------------------

    async def _acquire(self, origin: Origin, request: httpx.Request, timeouts: dict[str, float | None]) -> H1Connection:
        reused = self._take_idle(origin)
        if reused is not None:
            return reused
        if self._max is None or self._open < self._max:
            self._open += 1
        elif not self._evict_idle():
            reused = await self._queue(origin, timeouts.get("pool"))
            if reused is not None:
                return reused
        try:
            return await self._connect(origin, request, timeouts.get("connect"))
        except BaseException:
            self._free_slot()
            raise

    def _take_idle(self, origin: Origin) -> H1Connection | None:
        idle = self._idle.get(origin)
        now = asyncio.get_running_loop().time()
        while idle:
            connection = idle.pop()
            self._idle_count -= 1
            if not connection.closed and (self._expiry is None or now - connection.idle_since < self._expiry):
                return connection
            connection.abort()
            self._open -= 1
        return None

    def _evict_idle(self) -> bool:
        """Close one idle connection (to any origin) to make room; its slot is the caller's."""
        for idle in self._idle.values():
            if idle:
                idle.pop(0).abort()
                self._idle_count -= 1
                return True
        return False

    async def _queue(self, origin: Origin, timeout: float | None) -> H1Connection | None:
        future: asyncio.Future[H1Connection | None] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(origin, future)
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await future
        except BaseException as exc:
            if future.done() and not future.cancelled():
                given = future.result()  # handed over as we were cancelled: give it back
                if given is None:
                    self._free_slot()
                else:
                    self.release(given)
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise httpx.PoolTimeout("timed out waiting for a connection from the pool") from None
            raise

    async def _connect(self, origin: Origin, request: httpx.Request, timeout: float | None) -> H1Connection:
        loop = asyncio.get_running_loop()
        tls = self._ssl if origin[0] == b"https" else None
        sni = request.extensions.get("sni_hostname") or request.url.host if tls is not None else None
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    lambda: H1Connection(loop, origin), request.url.host, origin[2], ssl=tls, server_hostname=sni
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"timed out connecting to {request.url.host}:{origin[2]}") from None
        except OSError as exc:
            reason = exc.strerror or str(exc) or repr(exc)
            raise httpx.ConnectError(f"cannot connect to {request.url.host}:{origin[2]}: {reason}") from exc
        return connection

    def release(self, connection: H1Connection) -> None:
        """A response is done with ``connection``: hand it on, keep it idle, or close it."""
        if connection.closed or self._closed:
            connection.abort()
            self._free_slot()
            return
        for waiter in self._waiters:
            if waiter.origin == connection.origin and not waiter.future.done():
                self._waiters.remove(waiter)
                waiter.future.set_result(connection)
                return
        if self._waiters or (self._max_idle is not None and self._idle_count >= self._max_idle):
            connection.abort()  # another origin needs the slot, or enough are idle already
            self._free_slot()
            return
        self._idle.setdefault(connection.origin, []).append(connection)
        self._idle_count += 1

    def _free_slot(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_result(None)  # the slot passes to the waiter
                return
        self._open -= 1

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                connection.abort()
                self._open -= 1
        self._idle.clear()
        self._idle_count = 0


def _serialize(request: httpx.Request) -> tuple[bytes, httpx.AsyncByteStream | bytes, bool]:
    """The request line and headers, the body (bytes when httpx already has it whole), and
    whether the body goes chunked."""
    lines = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    chunked = False
    for name, value in request.headers.raw:
        lines += (name, b": ", value, b"\r\n")
        if name.lower() == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    lines.append(b"\r\n")
    try:
        body: httpx.AsyncByteStream | bytes = request.content
    except httpx.RequestNotRead:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        body = request.stream
    return b"".join(lines), body, chunked
