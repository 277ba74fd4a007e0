"""uvicorn's sans-I/O WebSocket protocol as ``think serve`` runs it: small per open connection.

Most of a chat server's WebSockets are idle (a page left open), so what each one holds decides
how many one process can keep. Besides the compression (:mod:`.ws_compression`), uvicorn gives
every connection an ``asyncio.Queue`` for what the app receives and an ``asyncio.Event`` for
write flow control; each allocates its deques up front (~3 KiB and ~1 KiB, measured with
tracemalloc). Here both are replaced by single-waiter equivalents that allocate only while
they hold something (only the methods uvicorn calls are provided), and the upgrade request and
response are let go once the handshake is done, by uvicorn's protocol and by the parser of
``websockets`` (see :func:`_restart_frame_parser`). The protocol is uvicorn's own otherwise
(``ws=`` takes a class).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import Protocol
from websockets.server import ServerProtocol
from websockets.streams import StreamReader

from .ws_compression import WS_COMPRESSION_MODES, CompactDeflateFactory

__all__ = ["CompactWebSocketProtocol", "uvicorn_ws_options"]


class _ReceiveQueue:
    """What uvicorn's protocol asks of its receive queue — ``put_nowait``, ``get`` (awaited by
    the one task running the app), ``empty`` — holding nothing while empty."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[Any] | None = None
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: Any) -> None:
        if self._items is None:
            self._items = deque()
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def empty(self) -> bool:
        return not self._items

    async def get(self) -> Any:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        assert self._items is not None
        item = self._items.popleft()
        if not self._items:
            self._items = None
        return item


class _WritableFlag:
    """What uvicorn's protocol asks of its write flow-control event — ``set``, ``clear``,
    ``is_set``, ``wait`` — with its waiters allocated only while someone waits."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        if self._set:
            return True
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)
        return True


class CompactWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's protocol with :class:`_ReceiveQueue`, :class:`_WritableFlag` and, when
    ``compression`` is ``"large"``, :class:`~think_core.server.ws_compression.CompactDeflateFactory`."""

    compression = "large"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Swapped only where they are what this was written against (a uvicorn that changes
        # them keeps its own).
        if type(self.queue) is asyncio.Queue and self.queue.empty():
            self.queue = _ReceiveQueue()  # type: ignore[assignment]
        if type(self.writable) is asyncio.Event:
            flag = _WritableFlag()
            if self.writable.is_set():
                flag.set()
            self.writable = flag  # type: ignore[assignment]
        if self.compression == "large" and self.config.ws_per_message_deflate:
            self.conn.available_extensions = [CompactDeflateFactory()]

    async def send(self, message: Any) -> None:
        await super().send(message)
        if self.handshake_complete and hasattr(self, "response"):
            # The upgrade request and its response (headers parsed and raw, ~3 KiB) are kept by
            # uvicorn for the connection's life but not read once the response went out; what
            # the app reads of the request is in its scope.
            del self.request, self.response
            _restart_frame_parser(self.conn)


def _restart_frame_parser(conn: Any) -> None:
    """Let go of the upgrade request that ``websockets``' parser still holds.

    ``ServerProtocol.parse`` reads the request into a local, then ``yield from``s the frame
    parser (``Protocol.parse``) for the rest of the connection, so the request (its headers
    parsed and raw, ~2.5 KiB) stays alive in the generator's frame as long as the socket is
    open. Once the frame parser waits at the top of its loop for data (nothing of a frame read
    yet), a frame parser started afresh is in the very same state without that frame: it
    replaces the old one, as ``websockets`` itself replaces its parser (with ``discard``) on a
    close. In any other state, or with a ``websockets`` shaped otherwise, nothing changes."""
    handshake = conn.parser
    frames = getattr(handshake, "gi_yieldfrom", None)
    waiting = getattr(frames, "gi_yieldfrom", None)
    if (
        getattr(handshake, "gi_code", None) is not ServerProtocol.parse.__code__
        or getattr(frames, "gi_code", None) is not Protocol.parse.__code__
        or getattr(waiting, "gi_code", None) is not StreamReader.at_eof.__code__  # (its buffer is empty)
    ):
        return
    parser = Protocol.parse(conn)
    next(parser)  # to where the old one waits: the top of its loop, for data
    conn.parser = parser
    handshake.close()


def uvicorn_ws_options(mode: str = "large") -> dict[str, Any]:
    """The ``uvicorn.Config`` keyword arguments for a ``think serve --ws-compression`` mode (see
    :data:`~think_core.server.ws_compression.WS_COMPRESSION_MODES`)."""
    if mode not in WS_COMPRESSION_MODES:
        raise ValueError(f"not a WebSocket compression mode: {mode!r} (one of {', '.join(WS_COMPRESSION_MODES)})")
    protocol = type("CompactWebSocketProtocol", (CompactWebSocketProtocol,), {"compression": mode})
    return {"ws": protocol, "ws_per_message_deflate": mode != "off"}
