"""A scriptable HTTP/1.1 server on a real loopback socket, for provider tests.

Provider code is tested against real sockets because TCP splits reads,
connections reset, chunked bodies end early — none of which a patched client reproduces.
The server runs on the test's own event loop (``asyncio.start_server`` on 127.0.0.1, port 0).

Usage::

    from tests.loopback import LoopbackServer, Reply, loopback  # noqa: F401  (fixture)

    async def test_x(loopback: LoopbackServer):
        loopback.enqueue(Reply.sse(RECORDED_STREAM, chunk_size=7))
        model = OpenAIChatModel("m", base_url=loopback.url + "/v1")
        ...
        assert loopback.requests[0].json["stream"] is True

Replies are served in FIFO order; an optional ``handler(request) -> Reply`` is used once the
queue is empty. With nothing scripted the server answers 418 (not retryable), so a missing
script fails fast instead of hanging or being retried.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio

__all__ = ["LoopbackServer", "RecordedRequest", "Reply", "loopback", "sse_body"]


@dataclass
class RecordedRequest:
    """What a client sent. Header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """One scripted response.

    ``body`` is either bytes (sent with ``content-length``) or a list of byte chunks, sent with
    chunked transfer encoding, one write (and ``chunk_delay`` pause) per chunk so the client sees
    them as separate reads. ``delay`` pauses before the status line (for timeout tests).
    ``disconnect_after=N`` ends the connection after N chunks: with ``reset=True`` by TCP RST,
    otherwise by a clean FIN — either way the body is incomplete. ``no_response=True`` hangs up
    (FIN, or RST with ``reset``) without sending anything, as a crashed upstream does.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | list[bytes] = b""
    chunk_delay: float = 0.0
    delay: float = 0.0
    disconnect_after: int | None = None
    reset: bool = False
    no_response: bool = False

    @classmethod
    def sse(
        cls,
        stream: str | bytes,
        *,
        chunk_size: int | None = None,
        chunks: Iterable[bytes] | None = None,
        chunk_delay: float = 0.0,
        status: int = 200,
        headers: dict[str, str] | None = None,
        disconnect_after: int | None = None,
        reset: bool = False,
    ) -> Reply:
        """An event stream. Default: one chunk per event (split after each blank line);
        ``chunk_size=N`` cuts the bytes every N bytes regardless of framing; ``chunks`` gives
        the exact pieces."""
        data = stream.encode() if isinstance(stream, str) else stream
        if chunks is not None:
            parts = list(chunks)
            assert b"".join(parts) == data, "chunks must add up to the stream"
        elif chunk_size is not None:
            parts = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)]
        else:
            parts = _split_events(data)
        return cls(
            status=status,
            headers={"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", **(headers or {})},
            body=parts,
            chunk_delay=chunk_delay,
            disconnect_after=disconnect_after,
            reset=reset,
        )

    @classmethod
    def json(cls, obj: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
        return cls(
            status=status,
            headers={"content-type": "application/json", **(headers or {})},
            body=json.dumps(obj).encode(),
        )


def sse_body(*payloads: Any, event_names: bool = False, done: bool = False) -> str:
    """Build an event stream from payloads (dicts are JSON-encoded). With ``event_names``,
    each event gets an ``event: <payload type>`` line, as Anthropic sends."""
    out = []
    for payload in payloads:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        if event_names and isinstance(payload, dict):
            out.append(f"event: {payload['type']}\n")
        out.append(f"data: {data}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out)


def _split_events(data: bytes) -> list[bytes]:
    parts, start = [], 0
    while True:
        end = data.find(b"\n\n", start)
        if end < 0:
            break
        parts.append(data[start : end + 2])
        start = end + 2
    if start < len(data):
        parts.append(data[start:])
    return parts


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Request Timeout",
            409: "Conflict", 418: "I'm a teapot", 429: "Too Many Requests", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 529: "Overloaded"}


class _Disconnected(Exception):
    pass


class _Connection:
    """Buffered reading with a watcher that notices the client hanging up mid-response."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buf = bytearray()
        self.closed_by_client = asyncio.Event()

    async def _more(self) -> None:
        data = await self.reader.read(65536)
        if not data:
            raise _Disconnected
        self.buf += data

    async def read_until(self, marker: bytes) -> bytes:
        while (end := self.buf.find(marker)) < 0:
            await self._more()
        out = bytes(self.buf[: end + len(marker)])
        del self.buf[: end + len(marker)]
        return out

    async def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._more()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def watch(self) -> None:
        try:
            await self._more()
        except (_Disconnected, ConnectionError):
            self.closed_by_client.set()


class LoopbackServer:
    """See the module docstring. ``url`` is ``http://127.0.0.1:<port>`` (no trailing slash;
    ``https://`` with ``tls``)."""

    def __init__(self, handler: Callable[[RecordedRequest], Reply] | None = None, *,
                 tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        """A server-side TLS context: serve ``https://`` (the url says so)."""
        self.requests: list[RecordedRequest] = []
        self.replies: list[Reply] = []
        self.incomplete: list[RecordedRequest] = []
        """Requests whose response the client abandoned (hung up) before it was complete."""
        self._abandoned = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.connections = 0
        """TCP connections accepted so far (to check connection reuse)."""

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def enqueue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def wait_abandoned(self, timeout: float = 5.0) -> None:
        """Wait until a client hangs up on a response before it was complete."""
        await asyncio.wait_for(self._abandoned.wait(), timeout)

    async def start(self) -> LoopbackServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> LoopbackServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- serving -------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(reader, writer)
        try:
            while True:
                request = await self._read_request(conn)
                self.requests.append(request)
                reply = self._next_reply(request)
                keep_open = await self._respond(conn, request, reply)
                if not keep_open or request.headers.get("connection", "").lower() == "close":
                    break
        except (_Disconnected, ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() cancels idle connections; end normally, because asyncio (3.11) logs an
            # error for a connection task that ends cancelled.
            pass
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            if not writer.transport.is_closing():
                writer.close()

    async def _read_request(self, conn: _Connection) -> RecordedRequest:
        head = await conn.read_until(b"\r\n\r\n")
        lines = head[:-4].decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                size = int((await conn.read_until(b"\r\n")).split(b";")[0], 16)
                chunk = await conn.read_exact(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
            return RecordedRequest(method, path, headers, bytes(body))
        length = int(headers.get("content-length", "0"))
        return RecordedRequest(method, path, headers, await conn.read_exact(length))

    def _next_reply(self, request: RecordedRequest) -> Reply:
        if self.replies:
            return self.replies.pop(0)
        if self.handler is not None:
            return self.handler(request)
        return Reply.json(
            {"error": {"message": f"loopback: no reply scripted for {request.method} {request.path}"}},
            status=418,
        )

    async def _respond(self, conn: _Connection, request: RecordedRequest, reply: Reply) -> bool:
        """Send ``reply``; return whether the connection can serve another request."""
        writer = conn.writer
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.no_response:
            self._hang_up(writer, reply.reset)
            return False
        chunked = isinstance(reply.body, list)
        writer.write(_head(reply, chunked))
        if not chunked:
            writer.write(reply.body)  # type: ignore[arg-type]
            await writer.drain()
            return True
        watcher = asyncio.ensure_future(conn.watch())
        try:
            await writer.drain()
            for n, part in enumerate(reply.body):  # type: ignore[arg-type]
                if reply.disconnect_after is not None and n >= reply.disconnect_after:
                    self._hang_up(writer, reply.reset)
                    return False
                if n and reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
                if conn.closed_by_client.is_set():
                    raise _Disconnected
                if part:
                    writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                    await writer.drain()
            if reply.disconnect_after is not None:
                self._hang_up(writer, reply.reset)
                return False
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        except (_Disconnected, ConnectionError):
            self.incomplete.append(request)
            self._abandoned.set()
            raise _Disconnected from None
        finally:
            if not watcher.done():
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)

    @staticmethod
    def _hang_up(writer: asyncio.StreamWriter, reset: bool) -> None:
        sock = writer.get_extra_info("socket")
        if reset and sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # closes with RST because of SO_LINGER(1, 0)
        else:
            writer.close()  # FIN after the buffered bytes


@pytest_asyncio.fixture
async def loopback() -> AsyncIterator[LoopbackServer]:
    """A started :class:`LoopbackServer`, closed after the test."""
    async with LoopbackServer() as server:
        yield server


def _head(reply: Reply, chunked: bool) -> bytes:
    """The status line and headers of ``reply``: chunked, or with its content length."""
    head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}"]
    headers = {k.lower(): v for k, v in reply.headers.items()}
    if chunked:
        headers["transfer-encoding"] = "chunked"
    else:
        headers["content-length"] = str(len(reply.body))
    head += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
