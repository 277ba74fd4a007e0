"""What a chat client may ask of a session's history, checked before anything is stored.

The server is the authority on what the assistant said. Its stored messages (and the answer
streaming now) are the only source of assistant content and of tool calls; a tool call runs
only because a model step (or the server's own code) made it. A chat client — ``useChat``
over HTTP, ``useAgentChat`` over the WebSocket, or anything speaking their protocols — may:

* add **user** messages (parts ``text``, ``file``, ``data-*``);
* **edit** its own user messages, and **regenerate** an answer of this chat (``messageId``
  naming a message of this chat);
* **keep, trim, delete from a point or clear** the transcript (``setMessages``), keeping the
  stored order;
* **answer the calls the server recorded as waiting**: a client tool's result for a call in
  ``input-available`` whose tool the server does not run itself, a human's approval or
  denial for a call in ``approval-requested``.

Its copy of an assistant message is never stored (the server keeps its own) and may not name a
tool call the stored message does not have. Anything else — an assistant or system message the
server did not write, a tool part in a user message, a result for a call awaiting approval or
run by the server, a ``messageId`` of another chat — is refused with
:class:`~think_core.errors.ClientRequestRefused` before anything is written.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from ..errors import ClientRequestRefused
from ..messages import PENDING_TOOL_STATES, is_tool_part, tool_name_of
from ..turn.pending_calls import ToolAnswer
from ..types import UIMessage

__all__ = [
    "REGENERATE",
    "check_answers",
    "check_replacement",
    "check_transcript",
    "has_content",
    "waiting_parts",
]

REGENERATE = "regenerate-message"

#: Part types a user message may hold (besides the ``data-*`` parts of an app's own).
USER_PARTS = frozenset({"text", "file"})
#: Part types of the assistant's (and system) messages, besides ``tool-<name>`` and ``data-*``.
ASSISTANT_PARTS = frozenset(
    {"text", "reasoning", "file", "step-start", "source-url", "source-document", "dynamic-tool"}
)


def has_content(message: UIMessage) -> bool:
    """Whether a message says anything (the AI SDK keeps an empty assistant message, holding at
    most a ``step-start``, for a turn that failed before any output)."""
    return any(p.get("type") != "step-start" for p in message.parts)


def _check_parts(message: UIMessage) -> None:
    for part in message.parts:
        kind = str(part.get("type"))
        if kind.startswith("data-"):
            continue
        if message.role == "user":
            if kind not in USER_PARTS:
                raise ClientRequestRefused(
                    f"message {message.id!r}: a user message may hold text, file and data-* parts, not {kind!r}"
                )
        elif kind not in ASSISTANT_PARTS and not kind.startswith("tool-"):
            raise ClientRequestRefused(f"message {message.id!r}: unknown part type {kind!r}")


def _check_unique(messages: Sequence[UIMessage]) -> None:
    seen: set[str] = set()
    for message in messages:
        if message.id in seen:
            raise ClientRequestRefused(f"the transcript holds message id {message.id!r} twice")
        seen.add(message.id)


def call_ids(message: UIMessage) -> set[str]:
    return {str(p.get("toolCallId")) for p in message.parts if is_tool_part(p)}


def _check_copy(message: UIMessage, stored: UIMessage) -> None:
    """A client's copy of a stored message: same role; an assistant's copy names no tool call the
    stored message lacks (its text is ignored: the stored message is what counts)."""
    if stored.role != message.role:
        raise ClientRequestRefused(
            f"message {message.id!r} is a {stored.role} message in this chat; a client cannot change its role to {message.role!r}"
        )
    if message.role == "user":
        _check_parts(message)
        return
    made_up = sorted(call_ids(message) - call_ids(stored))
    if made_up:
        raise ClientRequestRefused(
            f"message {message.id!r} names tool call(s) {', '.join(map(repr, made_up))} that no model step of this chat made"
        )


def _refuse_new(message: UIMessage) -> ClientRequestRefused:
    return ClientRequestRefused(
        f"message {message.id!r} is not in this chat: a client may add user messages only "
        f"({message.role} messages are written by the server)"
    )


def check_transcript(
    stored: Sequence[UIMessage],
    incoming: Sequence[UIMessage],
    *,
    trigger: str,
    message_id: str | None,
    in_flight: Collection[str] = (),
) -> None:
    """Refuse a chat request's transcript that asks for what only the server may do.

    ``in_flight``: ids of the assistant messages turns are writing now (a client following a
    running answer has it already; it is not stored yet, and its copy is not stored either)."""
    _check_unique(incoming)
    by_id = {m.id: m for m in stored}
    for message in incoming:
        known = by_id.get(message.id)
        if known is not None:
            _check_copy(message, known)
        elif message.role == "user":
            _check_parts(message)
        elif message.role != "assistant" or (has_content(message) and message.id not in in_flight):
            raise _refuse_new(message)
    if message_id is not None and message_id not in by_id and message_id not in in_flight:
        if trigger == REGENERATE or message_id not in {m.id for m in incoming}:
            raise ClientRequestRefused(f"messageId {message_id!r} is not a message of this chat")


def check_replacement(stored: Sequence[UIMessage], incoming: Sequence[UIMessage]) -> list[UIMessage]:
    """The history a client's whole transcript (``setMessages``) may set, or refused: its user
    messages as the client has them (new ones, edits), every other message as stored, the stored
    ones in their stored order."""
    _check_unique(incoming)
    by_id = {m.id: m for m in stored}
    position = {m.id: i for i, m in enumerate(stored)}
    resolved: list[UIMessage] = []
    last = -1
    for message in incoming:
        known = by_id.get(message.id)
        if known is None:
            if message.role != "user":
                raise _refuse_new(message)
            _check_parts(message)
            resolved.append(message)
            continue
        _check_copy(message, known)
        if position[message.id] < last:
            raise ClientRequestRefused(f"message {message.id!r} is out of order: a client may remove messages, not reorder them")
        last = position[message.id]
        resolved.append(message if message.role == "user" else known)
    return resolved


def waiting_parts(stored: Iterable[UIMessage]) -> dict[str, dict[str, Any]]:
    """The tool parts of the assistant's messages still waiting, by call id."""
    return {
        str(p.get("toolCallId")): p
        for m in stored
        if m.role == "assistant"
        for p in m.parts
        if is_tool_part(p) and p.get("state") in PENDING_TOOL_STATES
    }


def check_answers(stored: Sequence[UIMessage], answers: Sequence[ToolAnswer], server_tools: Collection[str]) -> None:
    """Refuse answers to calls that are not waiting for them: a result (not a denial) for a call
    awaiting approval, or for a call of a tool the server runs itself. Answers to calls not
    waiting at all are left to the caller (a repeated answer is ignored, an unknown call is
    :class:`~think_core.errors.UnknownToolCall`)."""
    waiting = waiting_parts(stored)
    for answer in answers:
        part = waiting.get(answer.tool_call_id)
        if part is None or answer.approved is not None:
            continue
        state, tool = part.get("state"), tool_name_of(part)
        if state == "approval-requested" and answer.error is None:
            raise ClientRequestRefused(
                f"tool call {answer.tool_call_id!r} ({tool}) is waiting for an approval, not for a result from the client"
            )
        if state == "input-available" and tool in server_tools:
            raise ClientRequestRefused(
                f"tool call {answer.tool_call_id!r} ({tool}) runs on the server; a client cannot answer it"
            )
