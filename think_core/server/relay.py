"""One turn's stream, relayed to every WebSocket connection of its session.

Every tab of a session shows the same conversation, whichever transport started the turn: a
WebSocket chat request, a client's tool answer, or a ``POST /api/chat``. The relay encodes the
stream as ``cf_agent_*`` frames; it needs nothing but the chunks and what applying the client's
transcript recorded (never a read of the store in the middle of a stream).
"""

from __future__ import annotations

from typing import Any

from ..chat.transcript import ClientTranscript
from ..messages import origin_message_ids
from ..session import Session
from .frames import (
    chunk_frame,
    done_frame,
    failed_frame,
    message_updated_frame,
)
from .hub import Connection, SessionHub


class TurnRelay:
    """The frames of one stream ``stream_id`` of ``session_id``. ``sender`` (the connection that
    asked, if any) already has the messages it sent, so only the other tabs are told of them."""

    def __init__(
        self,
        hub: SessionHub,
        session_id: str,
        stream_id: str,
        transcript: ClientTranscript,
        *,
        sender: Connection | None = None,
    ) -> None:
        self.hub = hub
        self.session_id = session_id
        self.stream_id = stream_id
        self.transcript = transcript
        self.sender = sender
        self.started = False
        self.seq = 0

    def _broadcast(self, frame: dict[str, Any], *, exclude: Connection | None = None) -> None:
        self.hub.broadcast(self.session_id, frame, exclude=exclude)

    def chunk(self, chunk: dict[str, Any]) -> None:
        if not self.started:
            self.started = True
            self._announce()
        # `seq` is the chunk's place in the turn's stream log: a client that saw it live skips
        # it when the same chunk comes again in a resume's replay.
        if self.hub.connections(self.session_id):  # (an HTTP chat nobody watches: no frame to encode)
            self._broadcast(chunk_frame(self.stream_id, chunk, continuation=self.transcript.continuation, seq=self.seq))
        self.seq += 1

    def _announce(self) -> None:
        # The first chunk means the transcript was applied: its messages are persisted.
        for message in self.transcript.appended:
            self._broadcast(message_updated_frame(message), exclude=self.sender)
        # The server's copy of an answered message, in every tab (the sender's is its own edit).
        for message in self.transcript.answered:
            self._broadcast(message_updated_frame(message))
        # Then the connections waiting for a continuation resume this stream, from its first
        # chunk — after the updates: a client builds a resumed stream on the message it holds
        # when it begins resuming, and an update arriving later is written over by the next chunk.
        self.hub.announce(self.session_id, self.stream_id)

    async def begin(self, session: Session) -> None:
        """Before the first chunk of a stream: the turn applied the request's messages. When a
        snapshot reached the sender while it was idle, its request may have crossed that snapshot
        on the wire (and been wiped from its list): it gets the transcript again, its message in
        it, before the answer starts."""
        sender = self.sender
        if sender is None or self.stream_id not in sender.requests:
            return
        sender.requests[self.stream_id] = self.hub.tick()
        if sender.crossable:
            sender.crossable = False
            read_at = self.hub.tick()
            self.hub.snapshot(self.session_id, await session.messages(), read_at, only=sender)

    async def finish(self, session: Session, *, close: bool = True, failure: str | None = None) -> None:
        """The end of the stream: the stored transcript (what every tab settles on), then — when
        ``close`` — the closing frame: done, with how the turn ended and the user messages it
        answered, or failed with ``failure``. In this order, so a client told its request is over
        never gets a snapshot read before the request it sends next."""
        try:
            frame = None
            if close:
                frame = await self._closing_frame(session) if failure is None else self._failed_frame(failure)
            if self.hub.connections(self.session_id):
                read_at = self.hub.tick()
                self.hub.snapshot(self.session_id, await session.messages(), read_at)
            if frame is not None:
                self._broadcast(frame)
        finally:
            if self.sender is not None:
                self.sender.requests.pop(self.stream_id, None)

    async def _closing_frame(self, session: Session) -> dict[str, Any]:
        live = await session.streams.find(self.hub.stream_requests.get(self.stream_id, self.stream_id))
        if live is not None and not live.streaming:
            outcome, ids = live.status, live.message_ids
        else:  # no turn ran (the answers left a call waiting)
            outcome, ids = ("completed" if self.started else "skipped"), self._origin_ids()
        return done_frame(self.stream_id, continuation=self.transcript.continuation, outcome=outcome, message_ids=ids)

    def _failed_frame(self, text: str) -> dict[str, Any]:
        return failed_frame(self.stream_id, text, continuation=self.transcript.continuation, message_ids=self._origin_ids())

    def _origin_ids(self) -> list[str] | None:
        return None if self.transcript.continuation else origin_message_ids(self.transcript.messages)
