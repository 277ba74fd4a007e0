"""One turn's stream, relayed to every WebSocket connection of its session.

Every tab of a session shows the same conversation, whichever transport started the turn: a
WebSocket chat request, a client's tool answer, or a ``POST /api/chat``. The relay encodes the
stream as ``cf_agent_*`` frames; it needs nothing but the chunks and what applying the client's
transcript recorded (never a read of the store in the middle of a stream).
"""

from __future__ import annotations

from typing import Any

from ..session import Session
from ..transcript import ClientTranscript
from .frames import (
    chunk_frame,
    done_frame,
    failed_frame,
    message_updated_frame,
    messages_frame,
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

    def _broadcast(self, frame: dict[str, Any], *, exclude: Connection | None = None) -> None:
        self.hub.broadcast(self.session_id, frame, exclude=exclude)

    def chunk(self, chunk: dict[str, Any]) -> None:
        if not self.started:
            self.started = True
            self._announce()
        self._broadcast(chunk_frame(self.stream_id, chunk, continuation=self.transcript.continuation))

    def _announce(self) -> None:
        # The first chunk means the transcript was applied: its messages are persisted.
        for message in self.transcript.appended:
            self._broadcast(message_updated_frame(message), exclude=self.sender)
        # The server's copy of an answered message, in every tab (the sender's is its own edit).
        for message in self.transcript.answered:
            self._broadcast(message_updated_frame(message))

    def done(self) -> None:
        self._broadcast(done_frame(self.stream_id, continuation=self.transcript.continuation))

    def failed(self, text: str) -> None:
        self._broadcast(failed_frame(self.stream_id, text, continuation=self.transcript.continuation))

    async def snapshot(self, session: Session) -> None:
        """The whole transcript, once the stream is over (what every tab settles on)."""
        if self.hub.connections(self.session_id):
            self._broadcast(messages_frame(await session.messages()))
