"""The per-session registry of WebSocket connections, and the tasks that run turns.

Every frame of a turn goes to *every* connection of its session (several tabs show one
conversation), so frames are fanned out here. Each connection has its own ordered outbox and
writer task: a broadcast is a non-blocking enqueue — it can be called from the engine's
synchronous chunk callback — and one slow client never stalls the turn or the other clients.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict, deque
from collections.abc import Coroutine
from typing import Any

from starlette.websockets import WebSocket

from .frames import STREAM_RESUME_NONE, STREAM_RESUMING, USE_CHAT_RESPONSE, dumps, messages_frame, resume_frame

logger = logging.getLogger("think.server")

#: Frames queued for one client before it counts as stuck and is disconnected.
MAX_OUTBOX = 10_000


class Connection:
    """One accepted WebSocket. ``send`` enqueues; a writer task delivers in order while frames
    are queued, and ends when the outbox is empty: an idle connection holds no task and no
    queue (most open chats are idle, and each of those cost a few KiB)."""

    def __init__(self, session_id: str, websocket: WebSocket) -> None:
        self.session_id = session_id
        self.websocket = websocket
        #: Frames waiting for the writer, which runs while there are any (both ``None`` when idle).
        self._outbox: deque[str | None] | None = None
        self._writer: asyncio.Task | None = None
        self._aborting: asyncio.Task | None = None
        self.closed = False
        #: Streams this connection gets from its own replay (see ``resume``), not the broadcast.
        self.following: set[str] = set()
        #: This connection's chat requests in flight (stream id → the hub tick at which the turn
        #: applied their messages; ``None`` until it did). See :meth:`takes_snapshot`.
        self.requests: dict[str, int | None] = {}
        #: A snapshot reached this connection while it had no request in flight: one it sent
        #: meanwhile may have crossed it on the wire (see ``TurnRelay.begin``).
        self.crossable = False

    def takes_snapshot(self, read_at: int) -> bool:
        """Whether a transcript read at hub tick ``read_at`` may replace this client's list: not
        while a request it sent is not applied yet, nor when one was applied after the read
        began — that snapshot lacks messages the client shows (clients replace their list with
        a snapshot wholesale, the optimistic user message included)."""
        return all(applied is not None and applied < read_at for applied in self.requests.values())

    def send(self, frame: dict[str, Any]) -> None:
        if self.closed:
            return
        if self._outbox is not None and len(self._outbox) >= MAX_OUTBOX:
            # A client this far behind is stuck: disconnect it (1013, "try again later") so it
            # reconnects and gets a fresh snapshot, instead of silently missing frames forever.
            logger.warning("closing a WebSocket of session %r: %d frames unsent", self.session_id, MAX_OUTBOX)
            self.closed = True
            self._aborting = asyncio.get_running_loop().create_task(self._abort())
            return
        self._enqueue(dumps(frame))

    def _enqueue(self, text: str) -> None:
        if self._outbox is None:
            self._outbox = deque()
        self._outbox.append(text)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write(), name=f"think-ws-writer-{self.session_id}")

    async def _abort(self) -> None:
        if self._outbox is not None:
            self._outbox.clear()
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        try:
            await self.websocket.close(code=1013)
        except Exception as exc:  # already gone
            logger.debug("closing a stuck WebSocket of session %r: %s", self.session_id, exc)

    async def _write(self) -> None:
        outbox = self._outbox
        try:
            while outbox:
                text = outbox.popleft()
                if text is None:  # closing: nothing is sent after it
                    self.closed = True
                    return
                await self.websocket.send_text(text)
        except Exception as exc:  # the client went away mid-send
            logger.debug("WebSocket writer of session %r stopped: %s", self.session_id, exc)
            self.closed = True
        finally:  # idle (or done): the next frame starts a writer of its own
            self._writer = self._outbox = None

    async def close(self) -> None:
        """Stop the writer after it has flushed what is queued."""
        if self._aborting is not None:
            await asyncio.gather(self._aborting, return_exceptions=True)
            return
        writer = self._writer
        if not self.closed:
            self.closed = True
            if writer is None or self._outbox is None:
                return  # nothing queued
            self._outbox.append(None)
        if writer is not None:
            await asyncio.wait([writer])


class SessionHub:
    """Connections by session id, plus the background tasks that run turns for them."""

    def __init__(self) -> None:
        self._connections: dict[str, set[Connection]] = defaultdict(set)
        self._tasks: dict[str, set[asyncio.Task]] = defaultdict(set)
        self._kinds: dict[asyncio.Task, str] = {}
        #: stream id (what clients see in frames) → engine request id, for cancellation.
        self.stream_requests: dict[str, str] = {}
        #: engine request id → stream id, so hook timeline events reach the right stream.
        self.request_streams: dict[str, str] = {}
        #: Connections told a continuation is pending (their resume probe id), per session.
        self._awaiting: dict[str, dict[Connection, str | None]] = defaultdict(dict)
        #: Connections that answered a tool call and will resume its continuation, per session.
        self._owners: dict[str, set[Connection]] = defaultdict(set)
        self._clock = 0

    # -- connections -----------------------------------------------------------------------------
    def connect(self, session_id: str, websocket: WebSocket) -> Connection:
        connection = Connection(session_id, websocket)
        self._connections[session_id].add(connection)
        return connection

    async def disconnect(self, connection: Connection) -> None:
        self._awaiting.get(connection.session_id, {}).pop(connection, None)
        self._owners.get(connection.session_id, set()).discard(connection)
        peers = self._connections.get(connection.session_id)
        if peers is not None:
            peers.discard(connection)
            if not peers:
                del self._connections[connection.session_id]
        await connection.close()

    def connections(self, session_id: str) -> list[Connection]:
        return list(self._connections.get(session_id, ()))

    def broadcast(self, session_id: str, frame: dict[str, Any], *, exclude: Connection | None = None) -> None:
        followed = frame.get("id") if frame.get("type") == USE_CHAT_RESPONSE else None
        for connection in self.connections(session_id):
            if connection is not exclude and (followed is None or followed not in connection.following):
                connection.send(frame)

    # -- resume handshake: connections waiting for a continuation to start ---------------------
    def await_stream(self, connection: Connection, probe_id: str | None) -> None:
        self._awaiting[connection.session_id][connection] = probe_id

    def hold_next_stream(self, connection: Connection) -> None:
        """``connection`` started a continuation and will ask to resume it: it gets the stream
        from its replay only, so no chunk reaches it live before the replay begins."""
        self._owners[connection.session_id].add(connection)

    def announce(self, session_id: str, stream_id: str) -> None:
        """A stream starts: the connections waiting for one are told to resume it (and get its
        chunks from their replay, so not from the broadcast)."""
        for owner in self._owners.pop(session_id, set()):
            owner.following.add(stream_id)
        for connection, probe_id in self._awaiting.pop(session_id, {}).items():
            connection.following.add(stream_id)
            connection.send(resume_frame(STREAM_RESUMING, probe_id, stream_id))

    def release_waiting(self, session_id: str) -> None:
        """No stream started after all: the waiting connections hear that nothing streams."""
        self._owners.pop(session_id, None)
        for connection, probe_id in self._awaiting.pop(session_id, {}).items():
            connection.send(resume_frame(STREAM_RESUME_NONE, probe_id))

    # -- transcript snapshots --------------------------------------------------------------------
    def tick(self) -> int:
        """The hub's clock: taken before a transcript read, and when a request is applied."""
        self._clock += 1
        return self._clock

    def snapshot(
        self, session_id: str, messages: list[Any], read_at: int, *, exclude: Connection | None = None, only: Connection | None = None
    ) -> None:
        """Send the transcript read at tick ``read_at`` to the connections it cannot wipe a
        message of (see :meth:`Connection.takes_snapshot`); a connection skipped gets the
        snapshot that closes its own request."""
        frame = messages_frame(messages)
        for connection in [only] if only is not None else self.connections(session_id):
            if connection is exclude or not connection.takes_snapshot(read_at):
                continue
            if not connection.requests:
                connection.crossable = True
            connection.send(frame)

    def pending(self, session_id: str, kind: str) -> bool:
        return any(self._kinds.get(t) == kind for t in self.tasks(session_id))

    # -- turn tasks ----------------------------------------------------------------------------------
    def spawn(self, session_id: str, coro: Coroutine[Any, Any, Any], *, name: str, kind: str = "turn") -> asyncio.Task:
        """Run ``coro`` in the background. Turns outlive the connection that asked for them (the
        other connections still receive the stream); the app cancels them at shutdown.
        ``kind`` (``"turn"`` or ``"settle"``) lets :meth:`wait_idle` wait for turns only."""
        task = asyncio.create_task(coro, name=name)
        tasks = self._tasks[session_id]
        tasks.add(task)
        self._kinds[task] = kind

        def forget(done: asyncio.Task) -> None:
            tasks.discard(done)
            self._kinds.pop(done, None)
            if not tasks:
                self._tasks.pop(session_id, None)
            if not done.cancelled() and done.exception() is not None:
                logger.error("server task %s failed", done.get_name(), exc_info=done.exception())

        task.add_done_callback(forget)
        return task

    def tasks(self, session_id: str) -> list[asyncio.Task]:
        return list(self._tasks.get(session_id, ()))

    async def wait_idle(
        self, session_id: str, *, kind: str | None = None, exclude: asyncio.Task | None = None,
        timeout: float | None = 60.0,
    ) -> None:
        """Wait (at most ``timeout`` seconds; ``None``: as long as it takes) for the session's background tasks — of ``kind``
        only, when given; never ``exclude`` — that exist now to finish."""
        pending = [
            t for t in self.tasks(session_id)
            if t is not exclude and (kind is None or self._kinds.get(t) == kind)
        ]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    def link(self, stream_id: str, request_id: str) -> None:
        self.stream_requests[stream_id] = request_id
        self.request_streams[request_id] = stream_id

    def unlink(self, stream_id: str) -> None:
        request_id = self.stream_requests.pop(stream_id, None)
        if request_id is not None:
            self.request_streams.pop(request_id, None)

    async def aclose(self) -> None:
        """Cancel every running task and close every connection (application shutdown)."""
        tasks = [t for group in self._tasks.values() for t in group]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for connection in [c for group in self._connections.values() for c in group]:
            await connection.close()
