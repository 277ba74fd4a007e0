"""The WebSocket chat endpoint ``/agents/think/{session_id}`` (Cloudflare agents protocol).

One :class:`ChatSocket` per connection routes client frames to the engine. Turns run as
background tasks of the :class:`~think_core.server.hub.SessionHub` so that the socket keeps
reading (a cancel frame must get through while a turn streams) and so that every connection
of the session receives the stream. A frame that cannot be handled is answered with an error
frame; the connection stays usable (see ``frames`` for the shapes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.websockets import WebSocket

from ..agent import Think
from ..chat.transcript import ClientTranscript
from ..errors import ClientRequestRefused, InvalidAttachment, UnknownToolCall
from ..messages import new_id
from ..turn.pending_calls import ToolAnswer
from ..types import UIMessage
from . import frames as F
from .frames import ProtocolError
from .hub import Connection, SessionHub
from .relay import TurnRelay
from .resume import StreamResume

logger = logging.getLogger("think.server")

#: Chat requests one connection may have running or queued at once.
MAX_REQUESTS_IN_FLIGHT = 8
#: Tool results and approvals one connection may have waiting at once.
MAX_ANSWERS_IN_FLIGHT = 32

Handler = Callable[["ChatSocket", dict[str, Any]], Awaitable[None]]


class ChatSocket:
    """The protocol state of one WebSocket connection to one session."""

    def __init__(
        self, agent: Think, hub: SessionHub, session_id: str, websocket: WebSocket, *, max_frame_bytes: int, subprotocol: str | None = None
    ) -> None:
        self.agent = agent
        self.subprotocol = subprotocol
        self.hub = hub
        self.session_id = session_id
        self.session = agent.session(session_id)
        self._in_flight: set[asyncio.Task] = set()
        self._answers_in_flight: set[asyncio.Task[Any]] = set()
        self._next_transcript: list[UIMessage] | None = None  # the newest setMessages not applied yet
        self._replacing = False
        self.websocket = websocket
        self.max_frame_bytes = max_frame_bytes
        self.connection: Connection | None = None
        self.resume: StreamResume | None = None

    # -- connection lifecycle -----------------------------------------------------------------
    async def run(self) -> None:
        await self.websocket.accept(subprotocol=self.subprotocol)
        # The session opens and its history is read before anything is sent. The history, then
        # the resume state, then the identity: the agents client is `ready` on the identity, so
        # a message it sends then was never wiped by a history frame read before it, nor marked
        # ready by the answer to its first resume probe (docs/frame-ordering.md).
        try:
            await self.session.open()
            history = await self.session.messages()
        except Exception as exc:  # a plugin's configure_session failed: say so, then close
            logger.exception("session %r could not be opened", self.session_id)
            self.connection = self.hub.connect(self.session_id, self.websocket)
            self.send(F.identity_frame(self.session_id))
            self.send(F.error_frame(str(exc) or type(exc).__name__, "internal_error"))
            await self.hub.disconnect(self.connection)
            await self.websocket.close(code=1011)
            return
        self.connection = self.hub.connect(self.session_id, self.websocket)
        self.resume = StreamResume(self.hub, self.session, self.connection)
        try:
            self.resume.hold_running()
            self.send(F.messages_frame(history, connect=True))
            await self.resume.on_connect()
            self.send(F.identity_frame(self.session_id))
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:
                    data = message.get("bytes") or b""
                    try:
                        text = data.decode("utf-8")
                    except UnicodeDecodeError:
                        self.send(F.error_frame("binary frames must be UTF-8 JSON", "invalid_frame"))
                        continue
                await self.handle_text(text)
        finally:
            await self.resume.aclose()
            await self.hub.disconnect(self.connection)

    def send(self, frame: dict[str, Any]) -> None:
        assert self.connection is not None
        self.connection.send(frame)

    def broadcast(self, frame: dict[str, Any], *, exclude: Connection | None = None) -> None:
        self.hub.broadcast(self.session_id, frame, exclude=exclude)

    async def handle_text(self, text: str) -> None:
        frame_type: str | None = None
        try:
            if len(text.encode("utf-8")) > self.max_frame_bytes:
                raise ProtocolError(f"frame exceeds {self.max_frame_bytes} bytes", "payload_too_large")
            frame = F.parse_frame(text)
            frame_type = frame["type"]
            handler = _HANDLERS.get(frame_type)
            if handler is None:
                raise ProtocolError(f"unknown frame type {frame_type!r}", "unknown_type")
            await handler(self, frame)
        except ProtocolError as exc:
            if frame_type is None and exc.kind == "invalid_json":  # perhaps a chat request: it never became a turn
                exc.message = await self._report_unparsed(exc)
            if frame_type == F.USE_CHAT_REQUEST and exc.request_id is not None:
                self.send(F.failed_frame(exc.request_id, exc.message))
            else:
                self.send(F.error_frame(exc.message, exc.kind, request_id=exc.request_id, frame_type=frame_type))
        except Exception as exc:  # a bug or an engine error must cost one frame, not the connection
            logger.exception("handling a %s frame failed", frame_type)
            self.send(F.error_frame(f"internal error: {type(exc).__name__}: {exc}", "internal_error", frame_type=frame_type))

    async def _report_unparsed(self, exc: ProtocolError) -> str:
        """``on_chat_error`` with ``stage="parse"``; the frame carries the text it settles on."""
        try:
            return await self.session.report_unparsed(exc, exc.request_id)
        except Exception:  # the client still gets its error frame
            logger.exception("reporting an unparsed chat request failed")
            return exc.message

    # -- chat requests -----------------------------------------------------------------------------
    async def on_chat_request(self, frame: dict[str, Any]) -> None:
        try:
            request = F.parse_chat_request(frame)
        except ProtocolError as exc:
            exc.message = await self._report_unparsed(exc)
            raise
        if request.id in self.hub.stream_requests or request.id in self.session.active_request_ids:
            raise ProtocolError(f"request id {request.id!r} is already streaming", request_id=request.id)
        if len(self._in_flight) >= MAX_REQUESTS_IN_FLIGHT:
            # Each queued request holds its messages until its turn: bound what one client can pile up.
            raise ProtocolError(
                f"too many chat requests in flight on this connection (at most {MAX_REQUESTS_IN_FLIGHT})",
                "too_many_requests",
                request_id=request.id,
            )
        # The turn's own id (a durable chat's submission id) is the server's: a client may use
        # its request ids again, and must never be taken for an earlier submission.
        turn_id = new_id("req")
        self.hub.link(request.id, turn_id)
        assert self.connection is not None
        # In flight from now: no snapshot read before the turn applies it reaches this client.
        self.connection.requests[request.id] = None
        stream = self._stream(request.transcript, request.id, body=request.body, requested=True, request_id=turn_id)
        task = self.hub.spawn(self.session_id, stream, name=f"think-ws-turn-{request.id}")
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _stream(
        self,
        transcript: ClientTranscript,
        stream_id: str,
        *,
        body: dict[str, Any] | None = None,
        requested: bool,
        request_id: str | None = None,
    ) -> None:
        """Apply ``transcript`` and relay the turn it asks for to every connection. A stream the
        client ``requested`` (it knows the id) always ends with a done or failed frame; one the
        server started (a tool answer's continuation) only once a chunk was sent."""
        relay = TurnRelay(self.hub, self.session_id, stream_id, transcript, sender=self.connection)
        failure: str | None = None
        close = False  # the stream ends with a closing frame (not when the task is cancelled)
        try:
            chunks = self.session.stream_transcript(
                transcript, body=body, trigger="websocket", request_id=request_id or stream_id
            )
            async for chunk in chunks:
                if not relay.started:
                    await relay.begin(self.session)
                relay.chunk(chunk)
            close = requested or relay.started
        except (ClientRequestRefused, InvalidAttachment) as exc:  # nothing was stored: the client is told why
            failure, close = str(exc), requested
            if not requested:
                self.send(F.error_frame(failure, "invalid_request"))
        except Exception as exc:
            failure, close = str(exc) or type(exc).__name__, requested or relay.started
            if close:
                logger.exception("WebSocket turn %s of session %r failed", stream_id, self.session_id)
            elif isinstance(exc, UnknownToolCall):
                self.send(F.error_frame(failure, "not_found"))
            else:
                logger.exception("answering a tool call of session %r failed", self.session_id)
                self.send(F.error_frame(failure, "internal_error"))
        finally:
            try:
                await relay.finish(self.session, close=close, failure=failure)
            finally:
                self.hub.unlink(stream_id)

    async def on_cancel(self, frame: dict[str, Any]) -> None:
        stream_id = F.require_str(frame, "id")
        request_id = self.hub.stream_requests.get(stream_id, stream_id)
        if not self.session.cancel(request_id):  # a chat still waiting for its turn
            await self.session.cancel_submission(request_id)

    async def on_clear(self, frame: dict[str, Any]) -> None:
        # session.clear() waits for the turns it cancels to persist their partial messages, so
        # nothing reappears in the history after it was cleared.
        await self.session.clear()
        self.broadcast({"type": F.CHAT_CLEAR})

    async def on_resume_request(self, frame: dict[str, Any]) -> None:
        assert self.resume is not None
        await self.resume.on_request(frame)

    async def on_resume_ack(self, frame: dict[str, Any]) -> None:
        assert self.resume is not None
        await self.resume.on_ack(frame)

    async def on_messages(self, frame: dict[str, Any]) -> None:
        """A client's ``setMessages``: the stored transcript becomes the client's (after the
        turns already queued), and the other connections are told."""
        raw = frame.get("messages")
        if not isinstance(raw, list):
            raise ProtocolError("cf_agent_chat_messages: 'messages' must be an array")
        # The last transcript wins: one replacement at a time per connection, and of the ones
        # sent while it waits or runs only the newest is applied after it. So a client flooding
        # setMessages holds at most two transcripts in this server's memory, not one per frame.
        self._next_transcript = F.parse_messages(raw)
        if not self._replacing:
            self._replacing = True
            # In the background, so a cancel frame still gets through while it waits for a turn.
            self.hub.spawn(self.session_id, self._replace_latest(), name=f"think-ws-messages-{self.session_id}", kind="edit")

    async def _replace_latest(self) -> None:
        sender = self.connection
        try:
            while self._next_transcript is not None:
                messages, self._next_transcript = self._next_transcript, None
                read_at = self.hub.tick()
                try:
                    stored = await self.session.replace_messages(messages, from_client=True)
                except Exception as exc:
                    error = f"the transcript was not replaced: {exc}"
                    self.send(F.error_frame(error, "invalid_request", frame_type=F.CHAT_MESSAGES))
                    continue
                self.hub.snapshot(self.session_id, stored, read_at, exclude=sender)
        finally:
            self._replacing = False

    # -- client tools and approvals ----------------------------------------------------------------
    async def on_tool_result(self, frame: dict[str, Any]) -> None:
        call_id = F.require_str(frame, "toolCallId")
        state = frame.get("state", "output-available")
        if state not in ("output-available", "output-error"):
            raise ProtocolError("cf_agent_tool_result: 'state' must be \"output-available\" or \"output-error\"")
        error: str | None = None
        if state == "output-error":
            text = frame.get("errorText")
            error = text if isinstance(text, str) and text else "Tool execution denied by user"
        answer = ToolAnswer(call_id, output=frame.get("output"), error=error)
        self._answer(answer, _optional_bool(frame, "autoContinue"), f"think-ws-tool-result-{call_id}")

    async def on_tool_approval(self, frame: dict[str, Any]) -> None:
        call_id = F.require_str(frame, "toolCallId")
        approved = frame.get("approved")
        if not isinstance(approved, bool):
            raise ProtocolError("cf_agent_tool_approval: 'approved' must be a boolean")
        self._answer(ToolAnswer(call_id, approved=approved), _optional_bool(frame, "autoContinue"), f"think-ws-approval-{call_id}")

    def _answer(self, answer: ToolAnswer, auto_continue: bool, name: str) -> None:
        """Answer a tool call and stream the auto-continuation (if one runs) to every
        connection, with ``continuation: true``."""
        if len(self._answers_in_flight) >= MAX_ANSWERS_IN_FLIGHT:
            # Each waits for the turn ahead of it: bound what one client can pile up.
            raise ProtocolError(
                f"too many tool answers in flight on this connection (at most {MAX_ANSWERS_IN_FLIGHT})", "too_many_requests"
            )
        transcript = ClientTranscript(answers=[answer], auto_continue=auto_continue)
        if auto_continue and self.resume is not None and self.resume.speaks_resume and self.connection is not None:
            # A client of the handshake resumes the continuation (from its first chunk) itself.
            self.hub.hold_next_stream(self.connection)

        async def settle() -> None:
            # A turn still streaming may not have persisted the call yet; answers also must not
            # overtake the turn that asked for them.
            await self.hub.wait_idle(self.session_id, kind="turn", timeout=None)
            # The continuation's request id is the stream id clients see, so they can cancel it.
            stream_id = new_id("cont")
            self.hub.link(stream_id, stream_id)
            try:
                await self._stream(transcript, stream_id, requested=False)
            finally:
                # Resume probes that waited for this continuation hear that none streams now.
                self.hub.release_waiting(self.session_id)

        task = self.hub.spawn(self.session_id, settle(), name=name, kind="settle")
        self._answers_in_flight.add(task)
        task.add_done_callback(self._answers_in_flight.discard)


def _optional_bool(frame: dict[str, Any], field: str) -> bool:
    value = frame.get(field, False)
    if not isinstance(value, bool):
        raise ProtocolError(f"{frame.get('type')}: '{field}' must be a boolean")
    return value


#: The method answering each frame type a client may send (one table for every connection:
#: bound methods per connection would cost each idle one a dict and eight objects).
_HANDLERS: dict[str, Handler] = {
    F.USE_CHAT_REQUEST: ChatSocket.on_chat_request,
    F.CHAT_REQUEST_CANCEL: ChatSocket.on_cancel,
    F.CHAT_CLEAR: ChatSocket.on_clear,
    F.TOOL_RESULT: ChatSocket.on_tool_result,
    F.TOOL_APPROVAL: ChatSocket.on_tool_approval,
    F.STREAM_RESUME_REQUEST: ChatSocket.on_resume_request,
    F.STREAM_RESUME_ACK: ChatSocket.on_resume_ack,
    F.CHAT_MESSAGES: ChatSocket.on_messages,
}


async def serve_socket(
    websocket: WebSocket, agent: Think, hub: SessionHub, *, max_frame_bytes: int, subprotocol: str | None = None
) -> None:
    session_id = websocket.path_params["session_id"]
    await ChatSocket(agent, hub, session_id, websocket, max_frame_bytes=max_frame_bytes, subprotocol=subprotocol).run()

