"""The stream-resume handshake of Cloudflare's agents chat protocol, on one WebSocket.

A client that (re)connects asks ``cf_agent_stream_resume_request {probeId}``. When a turn of
the session is streaming — here, or in another process sharing the store — it hears
``cf_agent_stream_resuming {id, probeId}``; when a tool answer's continuation is about to start,
``cf_agent_stream_pending`` (and ``resuming`` once it starts); otherwise
``cf_agent_stream_resume_none {reason: "idle"}``. After its ``cf_agent_stream_resume_ack {id}``
it gets the turn's chunks from the first one (``replay: true`` and their ``seq``), a
``replayComplete`` frame when the turn still runs, the live chunks, and the closing frame.

From the ``resuming`` frame on, the connection gets that stream only from its own replay,
never from the broadcast, so no chunk arrives twice or out of order.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..runner.streams import LiveStream, shows_nothing
from ..session import Session
from . import frames as F
from .hub import Connection, SessionHub


class StreamResume:
    """The resume handshake of one connection to one session."""

    def __init__(self, hub: SessionHub, session: Session, connection: Connection) -> None:
        self.hub = hub
        self.session = session
        self.connection = connection
        self._replays: set[asyncio.Task[Any]] = set()
        #: The client speaks the handshake (it asked to resume on this connection).
        self.speaks_resume = False
        #: Streams this connection acknowledged (and gets replayed).
        self._acked: set[str] = set()

    def hold_running(self) -> None:
        """As the connection joins the hub: the turn streaming now is not broadcast to it (see
        :meth:`on_connect`), before an await lets a chunk through."""
        live = self.session.streams.current
        if live is not None and live.streaming:
            self.connection.following.add(self._client_id(live))

    async def on_connect(self) -> None:
        """The resume state, unasked, before the identity frame: the agents client sends its
        first probe as the socket opens and answers it with the AI SDK's ``resumeStream``, which
        sets the chat's status when it settles — were the answer to come after ``ready``, it
        would mark a request sent meanwhile ready before its stream. Unasked (no ``probeId``),
        the state settles that probe before ``ready``; the probe's own answer comes later and is
        ignored (an ack sent twice replays once, see :meth:`on_ack`). A turn streaming now
        reaches this connection only once it has resumed it, never as a tail without a start."""
        await self._answer(None)

    async def on_request(self, frame: dict[str, Any]) -> None:
        self.speaks_resume = True
        probe = frame.get("probeId") if isinstance(frame.get("probeId"), str) else None
        await self._answer(probe)

    async def _answer(self, probe: str | None) -> None:
        live = await self.session.streams.find()
        if live is not None and live.streaming and not (live.chunks and shows_nothing(live.chunks[0])):
            stream_id = self._client_id(live)
            self.connection.following.add(stream_id)
            self.connection.send(F.resume_frame(F.STREAM_RESUMING, probe, stream_id))
        elif self.hub.pending(self.session.id, "settle"):
            self.hub.await_stream(self.connection, probe)
            self.connection.send(F.resume_frame(F.STREAM_PENDING, probe))
        else:
            self.connection.send(F.resume_frame(F.STREAM_RESUME_NONE, probe))

    async def on_ack(self, frame: dict[str, Any]) -> None:
        stream_id = F.require_str(frame, "id")
        if stream_id in self._acked:  # announced twice (unasked, then probed): replayed once
            return
        live = await self.session.streams.find(self.hub.stream_requests.get(stream_id, stream_id))
        if live is None:  # gone already: its answer is in the transcript
            self.connection.following.discard(stream_id)
            self.connection.send(F.done_frame(stream_id, replay=True))
            return
        self.connection.following.add(stream_id)
        self._acked.add(stream_id)
        task = self.hub.spawn(self.session.id, self._replay(live, stream_id), name=f"think-ws-replay-{stream_id}", kind="replay")
        self._replays.add(task)
        task.add_done_callback(self._replays.discard)

    def _client_id(self, live: LiveStream) -> str:
        """The id clients know a stream by: a WebSocket request's own id while this server relays
        it (the turn's id is the server's), else the turn's id."""
        return self.hub.request_streams.get(live.stream_id, live.stream_id)

    async def _replay(self, live: LiveStream, sid: str) -> None:
        # The stream stays in ``following`` afterwards: its closing broadcast must not arrive twice.
        send, cont = self.connection.send, live.continuation
        for chunk in await live.replay_prefix():  # a continuation: the message it continues
            send(F.chunk_frame(sid, chunk, continuation=cont, replay=True))
        # The chunks so far, without an await in between: none is missed or sent twice.
        replayed = len(live.chunks)
        for seq, chunk in enumerate(live.chunks[:replayed]):
            send(F.chunk_frame(sid, chunk, continuation=cont, replay=True, seq=seq))
        ended_before = not live.streaming
        if not ended_before:
            send(F.replay_complete_frame(sid, continuation=cont))
        async for seq, chunk in live.follow(replayed):
            send(F.chunk_frame(sid, chunk, continuation=cont, seq=seq))
        send(F.done_frame(sid, continuation=cont, outcome=live.status, message_ids=live.message_ids, replay=ended_before))

    async def aclose(self) -> None:
        for task in list(self._replays):
            task.cancel()
        if self._replays:
            await asyncio.gather(*self._replays, return_exceptions=True)
