"""The ``cf_agent_*`` WebSocket frames of Cloudflare's agents chat protocol (the frames
``@cloudflare/ai-chat``'s ``useAgentChat`` sends and expects) and the JSON error shape shared
with HTTP.

Frames are built and parsed here, in one place, so the WebSocket handler only routes them and
the wire shapes stay easy to audit against the clients.

Server → client frames built here:

* ``cf_agent_identity`` ``{type, name, agent}`` — last of the frames that open a connection
  (after the history and the resume state; ``name`` is the session id, ``agent`` is
  ``"think"``); the agents client's ``ready`` waits for it. See docs/frame-ordering.md.
* ``cf_agent_use_chat_response`` ``{type, id, body, done, error?, continuation?, replay?, seq?,
  replayComplete?, outcome?, messageIds?}`` — ``body`` is one UI message chunk as a JSON string;
  the closing frame has ``body: ""``, ``done: true``, the turn's ``outcome`` (``completed``,
  ``error``, ``aborted``, ``skipped``) and ``messageIds`` (the user messages it answered); a
  request that fails before it streams gets ``{body: <message>, done: true, error: true}``.
  Chunks replayed to a resuming client carry ``replay: true`` and their ``seq``.
* ``cf_agent_chat_messages`` ``{type, messages, connect?}`` — the full transcript (``connect:
  true`` on the one that opens a connection).
* ``cf_agent_message_updated`` ``{type, message}``.
* ``cf_agent_chat_clear`` ``{type}``.
* ``cf_agent_stream_resuming`` ``{type, id, probeId?}`` — a turn is streaming: acknowledge it
  (``cf_agent_stream_resume_ack {id}``) to get its chunks so far, then the live ones.
* ``cf_agent_stream_pending`` ``{type, probeId?}`` — a continuation is about to stream;
  ``resuming`` follows when it starts (or ``resume_none`` when no turn runs after all).
* ``cf_agent_stream_resume_none`` ``{type, reason: "idle", probeId?}`` — nothing is streaming.
* ``cf_agent_error`` ``{type, error: {message, type}, id?, frameType?}`` — this server's answer to
  a frame it cannot handle (not JSON, unknown ``type``, missing or invalid fields). Not part of
  the Cloudflare protocol; its clients ignore unknown frame types. The connection stays open.
* ``think_timeline`` ``{type, id, event}`` — one hook event of a turn (see ``timeline``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..chat.transcript import ClientTranscript
from ..messages import coerce_messages
from ..runner.streams import dumps_chunk
from ..types import UIMessage

USE_CHAT_REQUEST = "cf_agent_use_chat_request"
USE_CHAT_RESPONSE = "cf_agent_use_chat_response"
CHAT_REQUEST_CANCEL = "cf_agent_chat_request_cancel"
CHAT_CLEAR = "cf_agent_chat_clear"
CHAT_MESSAGES = "cf_agent_chat_messages"
MESSAGE_UPDATED = "cf_agent_message_updated"
TOOL_RESULT = "cf_agent_tool_result"
TOOL_APPROVAL = "cf_agent_tool_approval"
STREAM_RESUME_REQUEST = "cf_agent_stream_resume_request"
STREAM_RESUME_ACK = "cf_agent_stream_resume_ack"
STREAM_RESUME_NONE = "cf_agent_stream_resume_none"
STREAM_RESUMING = "cf_agent_stream_resuming"
STREAM_PENDING = "cf_agent_stream_pending"
IDENTITY = "cf_agent_identity"
ERROR = "cf_agent_error"
TIMELINE = "think_timeline"

CHAT_TRIGGERS = ("submit-message", "regenerate-message")


class ProtocolError(Exception):
    """A client frame or request that cannot be handled; ``kind`` is the error ``type``."""

    def __init__(self, message: str, kind: str = "invalid_request", *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.request_id = request_id


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def dumps(value: Any) -> str:
    """Compact JSON, as browsers' ``JSON.stringify`` writes it (see ``dumps_chunk``)."""
    return dumps_chunk(value)


def error_body(message: str, kind: str) -> dict[str, Any]:
    """The error object of every JSON error this server sends (HTTP and WebSocket)."""
    return {"error": {"message": message, "type": kind}}


def error_frame(message: str, kind: str, *, request_id: str | None = None, frame_type: str | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": ERROR, **error_body(message, kind)}
    if request_id is not None:
        frame["id"] = request_id
    if frame_type is not None:
        frame["frameType"] = frame_type
    return frame


def _flags(frame: dict[str, Any], *, continuation: bool, replay: bool = False, seq: int | None = None) -> dict[str, Any]:
    if continuation:
        frame["continuation"] = True
    if replay:
        frame["replay"] = True
    if seq is not None:
        frame["seq"] = seq
    return frame


def chunk_frame(
    stream_id: str, chunk: dict[str, Any], *, continuation: bool = False, replay: bool = False, seq: int | None = None
) -> dict[str, Any]:
    frame = {"type": USE_CHAT_RESPONSE, "id": stream_id, "body": dumps(chunk), "done": False}
    return _flags(frame, continuation=continuation, replay=replay, seq=seq)


def done_frame(
    stream_id: str,
    *,
    continuation: bool = False,
    outcome: str | None = None,
    message_ids: Sequence[str] | None = None,
    replay: bool = False,
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": USE_CHAT_RESPONSE, "id": stream_id, "body": "", "done": True}
    if outcome is not None:
        frame["outcome"] = outcome
    if message_ids:
        frame["messageIds"] = list(message_ids)
    return _flags(frame, continuation=continuation, replay=replay)


def replay_complete_frame(stream_id: str, *, continuation: bool = False) -> dict[str, Any]:
    """Ends a resuming client's replay while the turn still streams: live chunks follow."""
    frame = {"type": USE_CHAT_RESPONSE, "id": stream_id, "body": "", "done": False, "replayComplete": True}
    return _flags(frame, continuation=continuation, replay=True)


def failed_frame(
    stream_id: str, message: str, *, continuation: bool = False, message_ids: Sequence[str] | None = None
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": USE_CHAT_RESPONSE, "id": stream_id, "body": message, "done": True, "error": True}
    frame["outcome"] = "error"
    if message_ids:
        frame["messageIds"] = list(message_ids)
    return _flags(frame, continuation=continuation)


def identity_frame(session_id: str) -> dict[str, Any]:
    return {"type": IDENTITY, "name": session_id, "agent": "think"}


def resume_frame(kind: str, probe_id: str | None, stream_id: str | None = None) -> dict[str, Any]:
    """``cf_agent_stream_resuming`` (with ``stream_id``), ``_pending`` or ``_resume_none``."""
    frame: dict[str, Any] = {"type": kind}
    if stream_id is not None:
        frame["id"] = stream_id
    if kind == STREAM_RESUME_NONE:
        frame["reason"] = "idle"
    if probe_id is not None:
        frame["probeId"] = probe_id
    return frame


def messages_frame(messages: list[Any], *, connect: bool = False) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": CHAT_MESSAGES, "messages": [_default(m) for m in messages]}
    if connect:  # useAgentChat keeps the messages it sent while the socket was reconnecting
        frame["connect"] = True
    return frame


def message_updated_frame(message: Any) -> dict[str, Any]:
    return {"type": MESSAGE_UPDATED, "message": _default(message)}


def timeline_frame(stream_id: str, event: dict[str, Any]) -> dict[str, Any]:
    return {"type": TIMELINE, "id": stream_id, "event": event}


# -- parsing ------------------------------------------------------------------------------------


#: How deeply a client's JSON may nest. AI SDK messages need a handful of levels; far deeper
#: values only serve to exhaust the recursion of whatever walks them later (a 500 then).
MAX_JSON_DEPTH = 64


def check_json(value: Any, what: str, *, request_id: str | None = None) -> None:
    """Refuse ``value`` when its JSON nests deeper than :data:`MAX_JSON_DEPTH` or holds a string
    that is not Unicode text (a lone surrogate such as ``"\\ud800"``, which JSON can spell but
    no database or UTF-8 stream can store). Walked without recursion, so the check itself cannot
    overflow."""
    level: list[Any] = [value]
    depth = 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise ProtocolError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels", "invalid_json", request_id=request_id)
        deeper: list[Any] = []
        for item in level:
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item if isinstance(item, list) else [item]
            for child in children:
                if isinstance(child, (dict, list)):
                    deeper.append(child)
                elif isinstance(child, str) and not _is_text(child):
                    raise ProtocolError(f"{what} holds a string that is not valid Unicode (a lone surrogate)", "invalid_json", request_id=request_id)
        level = deeper


def _is_text(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_frame(text: str) -> dict[str, Any]:
    """The frame object of ``text``; raises :class:`ProtocolError` unless it is a JSON object
    with a string ``type``."""
    try:
        frame = json.loads(text)
    except RecursionError:
        raise ProtocolError(f"frame nests deeper than {MAX_JSON_DEPTH} levels", "invalid_json") from None
    except ValueError as exc:
        raise ProtocolError(f"frame is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(frame, dict):
        raise ProtocolError("frame must be a JSON object", "invalid_frame")
    check_json(frame, "frame")
    if not isinstance(frame.get("type"), str):
        raise ProtocolError("frame has no string 'type'", "invalid_frame")
    return frame


def require_str(frame: dict[str, Any], field: str, *, request_id: str | None = None) -> str:
    value = frame.get(field)
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"{frame.get('type')}: '{field}' must be a non-empty string", request_id=request_id)
    return value


class ChatRequest:
    """A parsed ``cf_agent_use_chat_request``: ``transcript`` is what the client sent, ``body``
    what the turn sees as ``TurnContext.body`` (custom fields and ``clientTools``; not
    ``messages``/``trigger``/``messageId``)."""

    __slots__ = ("id", "transcript", "body")

    def __init__(self, id: str, transcript: ClientTranscript, body: dict[str, Any]) -> None:
        self.id = id
        self.transcript = transcript
        self.body = body


def split_chat_body(payload: dict[str, Any], *, request_id: str | None = None, drop: tuple[str, ...] = ()) -> tuple[ClientTranscript, dict[str, Any]]:
    """``(transcript, turn body)`` of an AI SDK chat request body.

    Shared by the WebSocket request and ``POST /api/chat`` (whose body also carries the chat
    ``id``, passed in ``drop``)."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        raise ProtocolError("request body: 'messages' must be an array", request_id=request_id)
    trigger = payload.get("trigger", "submit-message")
    if trigger not in CHAT_TRIGGERS:
        raise ProtocolError(f"request body: 'trigger' must be one of {', '.join(CHAT_TRIGGERS)}", request_id=request_id)
    message_id = payload.get("messageId")
    if message_id is not None and not isinstance(message_id, str):
        raise ProtocolError("request body: 'messageId' must be a string", request_id=request_id)
    client_tools = payload.get("clientTools")
    if client_tools is not None and not isinstance(client_tools, list):
        raise ProtocolError("request body: 'clientTools' must be an array", request_id=request_id)
    skip = {"messages", "trigger", "messageId", *drop}
    body = {k: v for k, v in payload.items() if k not in skip}
    transcript = ClientTranscript(parse_messages(messages, request_id=request_id), trigger, message_id)
    return transcript, body


def parse_messages(raw: list[Any], *, request_id: str | None = None) -> list[UIMessage]:
    """Validate the client's messages (AI SDK ``UIMessage`` shape)."""
    if not all(isinstance(m, dict) for m in raw):
        raise ProtocolError("every message must be a JSON object", request_id=request_id)
    try:
        return coerce_messages(raw)
    except Exception as exc:  # pydantic's ValidationError: show what is wrong, not a trace
        raise ProtocolError(f"invalid message: {_first_line(exc)}", request_id=request_id) from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return " ".join(text[:3]) if text else type(exc).__name__


def parse_chat_request(frame: dict[str, Any]) -> ChatRequest:
    request_id = require_str(frame, "id")
    init = frame.get("init")
    if not isinstance(init, dict):
        raise ProtocolError("cf_agent_use_chat_request: 'init' must be an object", request_id=request_id)
    method = init.get("method")
    if not isinstance(method, str) or method.upper() != "POST":
        raise ProtocolError("cf_agent_use_chat_request: 'init.method' must be \"POST\"", request_id=request_id)
    raw = init.get("body")
    if not isinstance(raw, str):
        raise ProtocolError("cf_agent_use_chat_request: 'init.body' must be a JSON string", request_id=request_id)
    try:
        payload = json.loads(raw)
    except RecursionError:
        what = "cf_agent_use_chat_request: 'init.body'"
        raise ProtocolError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels", "invalid_json", request_id=request_id) from None
    except ValueError as exc:
        raise ProtocolError(f"cf_agent_use_chat_request: 'init.body' is not valid JSON: {exc}", "invalid_json", request_id=request_id) from None
    if not isinstance(payload, dict):
        raise ProtocolError("cf_agent_use_chat_request: 'init.body' must be a JSON object", request_id=request_id)
    check_json(payload, "cf_agent_use_chat_request: 'init.body'", request_id=request_id)
    transcript, body = split_chat_body(payload, request_id=request_id)
    return ChatRequest(request_id, transcript, body)
