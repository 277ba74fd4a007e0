"""UI messages (what is persisted and sent to chat front ends) and their conversion to the
provider-neutral model messages sent to a model."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from .models.base import (
    AssistantMessage,
    ModelMessage,
    ReasoningBlock,
    ToolCallRequest,
    ToolMessage,
    UserMessage,
)
from .models.content import FilePart, TextPart
from .types import UIMessage

# Tool-part states that carry a result the model must see.
SETTLED_TOOL_STATES = frozenset({"output-available", "output-error", "output-denied"})
# Tool-part states that wait for the client (a client tool or a human approval).
PENDING_TOOL_STATES = frozenset({"input-available", "approval-requested", "approval-responded"})

MessageInput = str | UIMessage | dict[str, Any] | Sequence[UIMessage | dict[str, Any]]


def new_id(prefix: str = "msg") -> str:
    # 16 random hex digits, as uuid4().hex[:16] gave, at a fifth of its cost (several per turn).
    return f"{prefix}_{os.urandom(8).hex()}"


def user_message(text: str, *, id: str | None = None, metadata: dict[str, Any] | None = None) -> UIMessage:
    """A user UI message with one text part."""
    return UIMessage(id=id or new_id(), role="user", parts=[{"type": "text", "text": text}], metadata=metadata)


def coerce_messages(value: MessageInput) -> list[UIMessage]:
    """Accept a string, a UIMessage, a dict in UIMessage shape, or a list of those."""
    if isinstance(value, str):
        return [user_message(value)]
    if isinstance(value, (UIMessage, dict)):
        value = [value]
    messages = []
    for item in value:
        if isinstance(item, str):
            messages.append(user_message(item))
        elif isinstance(item, UIMessage):
            messages.append(item)
        else:
            data = dict(item)
            data.setdefault("id", new_id())
            messages.append(UIMessage.model_validate(data))
    return messages


def is_tool_part(part: dict[str, Any]) -> bool:
    kind = str(part.get("type", ""))
    return kind.startswith("tool-") or kind == "dynamic-tool"


def tool_name_of(part: dict[str, Any]) -> str:
    if part.get("type") == "dynamic-tool":
        return str(part.get("toolName", ""))
    return str(part["type"])[len("tool-"):]


def to_model_messages(history: Iterable[UIMessage]) -> list[ModelMessage]:
    """Convert persisted UI messages to model messages.

    An assistant message becomes one assistant model message per step (``step-start`` parts
    separate steps), each followed by the results of its tool calls. Tool calls that are still
    pending (a client tool, an approval) are left out, so no request ever carries a call
    without its result.
    """
    out: list[ModelMessage] = []
    for message in history:
        if message.role == "assistant":
            for step_parts in split_steps(message.parts):
                out.extend(_assistant_step(step_parts))
        else:
            out.append(_user_message(message))
    return out


def _user_message(message: UIMessage) -> UserMessage:
    """A user message's text, or its text and files in order when it holds ``file`` parts."""
    if not any(p.get("type") == "file" for p in message.parts):
        return UserMessage(content="".join(p.get("text", "") for p in message.parts if p.get("type") == "text"))
    content: list[TextPart | FilePart] = []
    for part in message.parts:
        if part.get("type") == "text":
            content.append(TextPart(text=part.get("text", "")))
        elif part.get("type") == "file":
            content.append(file_part(part))
    return UserMessage(content=content)


def file_part(part: dict[str, Any]) -> FilePart:
    """An AI SDK ``file`` part (``mediaType``, ``url``: a data URL or https, ``filename``) as the
    model gets it; ``ValueError`` naming what is wrong with a malformed one."""
    url, media_type, filename = part.get("url"), part.get("mediaType"), part.get("filename")
    if not isinstance(url, str) or not url:
        raise ValueError("a file part needs a url (a data: URL or https://)")
    if media_type is not None and not isinstance(media_type, str):
        raise ValueError("a file part's mediaType must be a string")
    return FilePart.from_url(url, media_type, filename if isinstance(filename, str) else None)


def split_steps(parts: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """An assistant message's parts, one list per model step (``step-start`` separates them)."""
    steps: list[list[dict[str, Any]]] = [[]]
    for part in parts:
        if part.get("type") == "step-start":
            if steps[-1]:
                steps.append([])
            continue
        steps[-1].append(part)
    return [s for s in steps if s]


def _assistant_step(parts: list[dict[str, Any]]) -> list[ModelMessage]:
    text: list[str] = []
    reasoning: list[ReasoningBlock] = []
    calls: list[ToolCallRequest] = []
    results: list[ToolMessage] = []
    for part in parts:
        kind = part.get("type")
        if kind == "text":
            text.append(part.get("text", ""))
        elif kind == "reasoning":
            reasoning.append(ReasoningBlock(text=part.get("text", ""), provider_metadata=part.get("providerMetadata")))
        elif is_tool_part(part) and part.get("state") in SETTLED_TOOL_STATES:
            name = tool_name_of(part)
            call_input = part.get("input")
            calls.append(
                ToolCallRequest(
                    id=part["toolCallId"],
                    name=name,
                    input=call_input if isinstance(call_input, dict) else {},
                    provider_metadata=part.get("callProviderMetadata"),
                )
            )
            if part["state"] == "output-available":
                results.append(ToolMessage(tool_call_id=part["toolCallId"], tool_name=name, output=part.get("output")))
            else:
                error = part.get("errorText") or "Tool execution was denied."
                results.append(ToolMessage(tool_call_id=part["toolCallId"], tool_name=name, output=error, is_error=True))
    messages: list[ModelMessage] = []
    if text or reasoning or calls:
        messages.append(
            AssistantMessage(
                text="".join(text),
                reasoning="".join(block.text for block in reasoning),
                reasoning_blocks=reasoning,
                tool_calls=calls,
            )
        )
    messages.extend(results)
    return messages


def origin_message_ids(messages: Sequence[UIMessage]) -> list[str] | None:
    """The ids of the trailing run of user messages: what a chat request asks to be answered
    (one for a send or a regeneration, several for sends queued together)."""
    ids: list[str] = []
    for message in reversed(messages):
        if message.role != "user":
            break
        ids.insert(0, message.id)
    return ids or None


def served(message: UIMessage) -> UIMessage:
    """``message`` as a client may see it: without the reasoning a turn with
    ``send_reasoning=False`` kept from its stream (stored, marked ``hidden``, for the model only)."""
    if not any(p.get("hidden") for p in message.parts):
        return message
    return message.model_copy(update={"parts": [p for p in message.parts if not p.get("hidden")]})
