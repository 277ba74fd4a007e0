"""Turning a chat client's request into engine input.

Chat clients (AI SDK ``useChat``, Cloudflare's agents client) send the *whole* transcript with
every request, while the engine is server-authoritative and appends only what is new. These
helpers compute that difference, apply a regenerate request, and find client tool results that
an AI SDK client reports by resending an assistant message with a settled tool part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..messages import PENDING_TOOL_STATES, coerce_messages, is_tool_part
from ..types import UIMessage
from .frames import ProtocolError


def parse_messages(raw: list[Any], *, request_id: Optional[str] = None) -> list[UIMessage]:
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


def new_messages(stored: list[UIMessage], incoming: list[UIMessage]) -> list[UIMessage]:
    """The incoming messages whose ids are not persisted yet, in the client's order."""
    known = {m.id for m in stored}
    return [m for m in incoming if m.id not in known]


def regenerate_cut(stored: list[UIMessage], incoming: list[UIMessage], message_id: Optional[str]) -> list[str]:
    """Ids of the stored messages a ``regenerate-message`` request replaces.

    The AI SDK drops the message being regenerated (``messageId``, else the last assistant
    message) and everything after it, then resends the rest. The stored tail after the last
    message the client still has goes, and so does ``messageId`` itself when it is stored.
    """
    ids = [m.id for m in stored]
    cut = len(ids)
    if message_id is not None and message_id in ids:
        cut = ids.index(message_id)
    client_ids = {m.id for m in incoming}
    kept = [i for i, mid in enumerate(ids[:cut]) if mid in client_ids]
    if kept:
        cut = min(cut, kept[-1] + 1)
    elif message_id is None and ids and stored[-1].role == "assistant":
        cut = len(ids) - 1
    return ids[cut:]


def superseded(
    stored: list[UIMessage], incoming: list[UIMessage], trigger: str, message_id: Optional[str]
) -> list[str]:
    """Ids of the stored messages a chat request replaces: a regeneration's cut, or — for a
    ``submit-message`` naming a stored ``messageId`` (the AI SDK's edit of an earlier message) —
    that message and everything after it. The client's version is then appended as new."""
    if trigger == "regenerate-message":
        return regenerate_cut(stored, incoming, message_id)
    ids = [m.id for m in stored]
    if message_id is not None and message_id in ids:
        return ids[ids.index(message_id):]
    return []


@dataclass
class ToolUpdate:
    """A client tool call that the client reports as settled."""

    tool_call_id: str
    output: Any = None
    error: Optional[str] = None


def settled_tool_updates(stored: list[UIMessage], incoming: list[UIMessage]) -> list[ToolUpdate]:
    """Tool parts pending on the server that the client resends as settled (``output-available``
    or ``output-error``): how an AI SDK client returns the result of a client-side tool."""
    pending: dict[str, dict[str, Any]] = {}
    for message in stored:
        if message.role == "assistant":
            for part in message.parts:
                if is_tool_part(part) and part.get("state") in PENDING_TOOL_STATES:
                    pending[part.get("toolCallId", "")] = part
    updates: list[ToolUpdate] = []
    for message in incoming:
        if message.role != "assistant":
            continue
        for part in message.parts:
            call_id = part.get("toolCallId")
            if not is_tool_part(part) or call_id not in pending:
                continue
            if part.get("state") == "output-available":
                updates.append(ToolUpdate(call_id, output=part.get("output")))
            elif part.get("state") == "output-error":
                updates.append(ToolUpdate(call_id, error=str(part.get("errorText") or "Tool execution failed.")))
    return updates


def message_with_tool_call(messages: list[UIMessage], tool_call_id: str) -> Optional[UIMessage]:
    for message in reversed(messages):
        if any(is_tool_part(p) and p.get("toolCallId") == tool_call_id for p in message.parts):
            return message
    return None
