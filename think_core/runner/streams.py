"""Resumable streams: each streaming turn's UI message chunks, kept so that a client that joins
late — a reloaded page, a second tab, a page connected to another server process — replays the
turn from its first chunk and then follows it live.

A :class:`LiveStream` holds the chunks of a turn running in this process in memory (followers
read them from there, without a store round trip) and writes them to the store in batches
behind the turn (every :data:`BATCH` chunks or :data:`FLUSH_DELAY` seconds, and at its end), so
the hot path never waits for a write. A durable turn resumed after a crash writes its stream
again from what its journal restores (its finished steps), then goes on live; the chunks of the
interrupted step go, as that step runs again. A stream another process runs is followed by
polling the store.

:class:`SessionStreams` is the per-session registry the runner begins and ends streams in, and
that transports ask for the stream to replay.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store import AsyncStore, Store, StreamInfo

logger = logging.getLogger("think.streams")

class _Unread(enum.Enum):
    UNREAD = "unread"


#: ``SessionStreams.find``'s caller did not read the stored stream.
_UNREAD = _Unread.UNREAD

#: Chunks after which a write is due even without a boundary.
BATCH = 32
#: Seconds a chunk waits at most for its batch to be written.
FLUSH_DELAY = 0.2
#: Seconds between two reads of a stream another process runs.
POLL_INTERVAL = 0.25
#: A stream another process runs is given up as dead after this long without a new chunk.
STALE_AFTER = 120.0


def shows_nothing(first_chunk: dict[str, Any]) -> bool:
    """Whether a turn's stream opening with ``first_chunk`` failed (or was stopped) before it
    showed anything: ``start`` is held back until the answer shows something, so such a stream
    is its ``error`` or ``abort`` alone. It left no message to resume, and its failure is in the
    history already: a reconnecting client is told nothing streams (HTTP 204, WebSocket
    ``resume_none``) rather than replayed an error it would take for its own."""
    return first_chunk.get("type") in ("error", "abort")



def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


#: One encoder for every chunk: ``json.dumps`` with options builds a new one per call, and a
#: live stream encodes each event (twice through ``think serve``: its log and its client).
#: ``encode`` keeps no state between calls, so threads may share it.
_CHUNK_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_default)


def dumps_chunk(value: Any) -> str:
    """Compact JSON, as browsers' ``JSON.stringify`` writes it. Tool outputs may hold values
    JSON cannot represent; they are converted rather than breaking the stream."""
    return _CHUNK_ENCODER.encode(value)


class StreamOpen:
    """A stream's opening — its row, and after a crash the chunks an earlier run left dropped
    (the stream is written again from what the journal restores) — made by whoever calls it
    with the store: the transaction writing the turn's input (see ``SessionStreams.begin``)."""

    __slots__ = ("session_id", "stream_id", "continuation", "message_ids", "restart", "written")

    def __init__(
        self, session_id: str, stream_id: str, continuation: bool, message_ids: list[str] | None, restart: bool
    ) -> None:
        self.session_id = session_id
        self.stream_id = stream_id
        self.continuation = continuation
        self.message_ids = message_ids
        self.restart = restart
        self.written = False

    def __call__(self, store: Store) -> None:
        store.open_stream(self.session_id, self.stream_id, continuation=self.continuation, message_ids=self.message_ids)
        if self.restart:
            store.truncate_stream(self.session_id, self.stream_id, 0)
        self.written = True


class StreamEnd:
    """A stream's last chunks and its outcome, written by whoever calls it with the store —
    the transaction that stores the turn's answer (see ``LiveStream.ending``)."""

    __slots__ = ("session_id", "stream_id", "first_seq", "bodies", "status", "opening", "written")

    def __init__(
        self, session_id: str, stream_id: str, first_seq: int, bodies: list[str], status: str, opening: StreamOpen | None
    ) -> None:
        self.session_id = session_id
        self.stream_id = stream_id
        self.first_seq = first_seq
        self.bodies = bodies
        self.status = status
        self.opening = opening
        self.written = False

    def __call__(self, store: Store) -> None:
        if self.opening is not None and not self.opening.written:
            self.opening(store)
        store.append_stream_chunks(self.session_id, self.stream_id, self.first_seq, self.bodies)
        store.finish_stream(self.session_id, self.stream_id, self.status)
        self.written = True


class LiveStream:
    """The chunks of one turn's stream, in order (``seq`` is the index), and its outcome."""

    def __init__(
        self,
        session_id: str,
        stream_id: str,
        db: AsyncStore,
        *,
        continuation: bool = False,
        message_ids: list[str] | None = None,
        status: str = "streaming",
        chunks: list[dict[str, Any]] | None = None,
        local: bool = True,
        opening: StreamOpen | None = None,
    ) -> None:
        self.session_id = session_id
        self.stream_id = stream_id
        self.continuation = continuation
        self.message_ids = message_ids
        self.status = status
        self.chunks: list[dict[str, Any]] = chunks or []
        #: Whether this process runs the turn (else it is followed from the store).
        self.local = local
        self._db = db
        self._written = len(self.chunks)
        self._waiters: list[asyncio.Future[None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._idle = 0.0  # seconds a followed remote stream went without a new chunk
        self._ending: StreamEnd | None = None
        #: The stream's opening until ``opened`` (for the transaction of the turn's input to
        #: make); nothing is written to the stream before it is made.
        self.opening = opening
        self._settled: asyncio.Future[None] | None = asyncio.get_running_loop().create_future() if opening else None
        self._started = any(c.get("type") == "start" for c in self.chunks[:1])
        # A continuation run here is resumed with the message it continues first (``None`` until
        # the turn has taken that message up, see ``continues``); any other stream with nothing.
        self._prefix: list[dict[str, Any]] | None = None if continuation and local else []

    @property
    def streaming(self) -> bool:
        return self.status == "streaming"

    # -- the turn's side ------------------------------------------------------------------------
    def append(self, chunk: dict[str, Any]) -> None:
        """Record a chunk the turn emitted (synchronous: called on the hot path)."""
        if chunk.get("type") == "start":
            if self._started:
                return  # a resumed turn starts its message again: the stream has its start already
            self._started = True
        self.chunks.append(chunk)
        self._wake()
        # No write of its own for a step's or a tool call's end: a durable turn resumed after a
        # crash writes its stream again from its journal, so the log only serves followers, who
        # can wait for the batch (a short turn is then one write instead of one per step).
        if len(self.chunks) - self._written >= BATCH:
            self._write_soon()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_DELAY, self._write_soon)

    def _write_soon(self) -> None:
        self._timer = None
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write(), name=f"think-stream-{self.stream_id}")

    async def opened(self) -> None:
        """The turn's input is written: the stream's opening was made in that transaction, or
        is made now. Chunks are written only from then on (a restarted stream drops its old
        ones first)."""
        opening, self.opening = self.opening, None
        try:
            if opening is not None and not opening.written:
                await self._db.atomic(opening, session_id=self.session_id, brief=True)
        finally:
            if self._settled is not None and not self._settled.done():
                self._settled.set_result(None)

    async def _write(self) -> None:
        if self._settled is not None:
            await self._settled
        while self._written < len(self.chunks):
            start, batch = self._written, self.chunks[self._written:]
            try:
                await self._db.append_stream_chunks(self.session_id, self.stream_id, start, [dumps_chunk(c) for c in batch])
            except Exception:  # the log serves late joiners: it must never break the turn
                logger.exception("writing the stream of turn %s failed", self.stream_id)
                return
            self._written = max(self._written, start + len(batch))

    def ending(self, status: str) -> StreamEnd:
        """The stream's end as it stands now — the chunks not written yet and ``status`` — for
        the transaction storing the turn's answer to write: a late joiner in another process
        then finds the turn streaming, or its answer stored and its stream whole, never one
        without the other, and the turn's end costs no round trip of its own."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        start, opening = self._written, self.opening
        bodies = [dumps_chunk(c) for c in self.chunks[start:]]
        # Not opened yet (the turn ended before its input was written): the end opens it too.
        self._ending = StreamEnd(self.session_id, self.stream_id, start, bodies, status, opening)
        return self._ending

    @property
    def awaits_prefix(self) -> bool:
        """A continuation run here whose continued message is not known yet (see ``continues``)."""
        return self._prefix is None

    def continues(self, message_chunks: list[dict[str, Any]]) -> None:
        """A continuation's turn took up the message it continues (its answers applied): what
        :meth:`replay_prefix` gives a client resuming the stream."""
        self._prefix = message_chunks
        self._wake()

    async def finish(self, status: str) -> None:
        """Write what is left and record the outcome (the turn's answer is already stored)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            await self.opened()
        except Exception:  # the log serves late joiners: it must never break the turn
            logger.exception("opening the stream of turn %s failed", self.stream_id)
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        end = self._ending
        if end is not None and end.written:
            self._written = max(self._written, end.first_seq + len(end.bodies))
        if end is None or not end.written or end.status != status or self._written < len(self.chunks):
            await self._write()
            try:
                await self._db.finish_stream(self.session_id, self.stream_id, status)
            except Exception:
                logger.exception("recording the end of the stream of turn %s failed", self.stream_id)
        self.status = status
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- a follower's side ----------------------------------------------------------------------
    async def replay_prefix(self) -> list[dict[str, Any]]:
        """What a client resuming this stream gets before its chunks. Clients rebuild a resumed
        answer from the resumed stream alone (the AI SDK starts it afresh at its first ``start``:
        a resume is a replay), so a continuation's resumers first get the message it continues
        — its earlier text and answered calls — as the chunks that build it, without ``finish``
        and without ``seq`` (they are not the stream's own). Empty for any other stream, and for
        a continuation run in another process (its followers rely on the closing snapshot)."""
        while self._prefix is None and self.streaming:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        return self._prefix or []

    async def follow(self, start: int = 0) -> AsyncGenerator[tuple[int, dict[str, Any]], None]:
        """``(seq, chunk)`` from ``start`` on, live, until the stream has ended."""
        seq = start
        while True:
            while seq < len(self.chunks):
                yield seq, self.chunks[seq]
                seq += 1
            if not self.streaming:
                return
            if self.local:
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                await waiter
            else:
                await self._poll()

    async def _poll(self) -> None:
        """Read what another process stored since the last read."""
        await asyncio.sleep(POLL_INTERVAL)
        bodies = await self._db.stream_chunks(self.session_id, self.stream_id, len(self.chunks))
        self.chunks.extend(json.loads(b) for b in bodies)
        if bodies:
            self._idle = 0.0
            return
        info = await self._db.get_stream(self.session_id, self.stream_id)
        self._idle += POLL_INTERVAL
        if info is None:
            self.status = "aborted"
        elif info.status != "streaming":
            self.chunks.extend(json.loads(b) for b in await self._db.stream_chunks(self.session_id, self.stream_id, len(self.chunks)))
            self.status = info.status
        elif self._idle >= STALE_AFTER:
            self.status = "aborted"


class SessionStreams:
    """The streams of one session: the turn running in this process, the last one that ended
    here, and (through the store) one running anywhere else."""

    def __init__(self, session_id: str, db: AsyncStore) -> None:
        self.session_id = session_id
        self._db = db
        self.current: LiveStream | None = None
        self.last: LiveStream | None = None

    def begin(
        self, stream_id: str, *, continuation: bool, message_ids: list[str] | None, replayed: list[dict[str, Any]] | None = None
    ) -> LiveStream:
        """Start recording ``stream_id`` (in memory: its ``opening`` is for the turn's input
        transaction to make, see ``LiveStream.opened``). A durable turn passes ``replayed``, the
        chunks of what its journal restores (none on its first run): after a crash its stream
        is written again from them, so it shows the whole answer whatever the crash cut off."""
        opening = StreamOpen(self.session_id, stream_id, continuation, message_ids, restart=replayed is not None)
        live = LiveStream(
            self.session_id, stream_id, self._db, continuation=continuation, message_ids=message_ids, opening=opening
        )
        # Written with the turn's first batch (a round trip less per turn), as any chunk is.
        for chunk in replayed or ():
            live.append(chunk)
        if replayed:  # restored after a crash: the stream already builds the whole message
            live.continues([])
        self.current = live
        return live

    async def end(self, live: LiveStream, status: str) -> None:
        await live.finish(status)
        if self.current is live:
            self.current = None
        self.last = live

    async def find(self, stream_id: str | None = None, *, stored: StreamInfo | None | _Unread = _UNREAD) -> LiveStream | None:
        """The stream to replay: ``stream_id`` (running or ended), or — ``None`` — the one
        running now, in this process or in another one sharing the store. ``stored``: what
        the store said of the session's stream (``get_stream``), when the caller read it."""
        for live in (self.current, self.last):
            if live is not None and (stream_id == live.stream_id or (stream_id is None and live.streaming)):
                return live
        info = await self._db.get_stream(self.session_id, stream_id) if stored is _UNREAD else stored
        if info is None or (stream_id is None and info.status != "streaming"):
            return None
        return await self._remote(info)

    async def _remote(self, info: StreamInfo) -> LiveStream | None:
        if info.status == "streaming" and not await self._may_still_run(info):
            # Its turn died with its process and nothing will resume it: it ended there.
            await self._db.finish_stream(self.session_id, info.stream_id, "aborted")
            return None
        chunks = [json.loads(b) for b in await self._db.stream_chunks(self.session_id, info.stream_id)]
        return LiveStream(
            self.session_id, info.stream_id, self._db, continuation=info.continuation,
            message_ids=info.message_ids, status=info.status, chunks=chunks, local=False,
        )

    async def _may_still_run(self, info: StreamInfo) -> bool:
        """A stream left ``streaming`` by another process runs there, or will run again when its
        durable submission is resumed; a plain turn whose process is gone never will (nor
        does one silent for longer than :data:`STALE_AFTER`)."""
        submission = await self._db.get_submission(self.session_id, info.stream_id)
        if submission is not None:
            return submission.status in ("pending", "running")
        return time.time() - info.updated_at < STALE_AFTER
