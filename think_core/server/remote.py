"""Turns other server processes run, relayed to this server's WebSocket clients.

With a store shared by several machines (PostgreSQL), a session's messages may arrive at any
server, and its turn runs where they arrived. The store tells every other server that a stream
opened (``listen_streams``); a server with connections for that session follows the stream from
the store and relays it like one of its own turns: the transcript so far (it holds the message
the turn answers), the turn's chunks from the first, the closing frame with its outcome, and the
stored transcript once it is over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..agent import Think
from ..session import Session
from . import frames as F
from .hub import SessionHub

logger = logging.getLogger("think.server")


class RemoteTurns:
    """Relays the streams other processes open to this server's connections of their session."""

    def __init__(self, agent: Think, hub: SessionHub) -> None:
        self.agent = agent
        self.hub = hub
        self._stop: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = await asyncio.to_thread(self.agent.listen_streams, self._heard)

    async def aclose(self) -> None:
        stop, self._stop = self._stop, None
        if stop is not None:
            await asyncio.to_thread(stop)

    def _heard(self, session_id: str, stream_id: str) -> None:
        """On the listener's thread: hand the news to the event loop."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._relay_soon, session_id, stream_id)

    def _relay_soon(self, session_id: str, stream_id: str) -> None:
        if self.hub.connections(session_id):
            self.hub.spawn(session_id, self.relay(session_id, stream_id), name=f"think-remote-{stream_id}", kind="remote")

    async def relay(self, session_id: str, stream_id: str) -> None:
        session = self.agent.session(session_id)
        live = await session.streams.find(stream_id)
        if live is not None and live.local:
            return  # after all, a turn of ours: relayed by its own transport
        if live is None:
            # Over, and forgotten when the session's next turn began: its answer is in the transcript.
            await self._snapshot(session)
            return
        await self._snapshot(session)
        async for seq, chunk in live.follow(0):
            self.hub.broadcast(session_id, F.chunk_frame(stream_id, chunk, continuation=live.continuation, seq=seq))
        # The transcript before the closing frame: a client told the turn is over may send at
        # once, and a snapshot read before that message must not overtake it.
        await self._snapshot(session)
        self.hub.broadcast(
            session_id,
            F.done_frame(stream_id, continuation=live.continuation, outcome=live.status, message_ids=live.message_ids),
        )

    async def _snapshot(self, session: Session) -> None:
        read_at = self.hub.tick()
        self.hub.snapshot(session.id, await session.messages(), read_at)
