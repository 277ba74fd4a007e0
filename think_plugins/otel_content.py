"""Messages in the shapes of the OpenTelemetry GenAI conventions (``gen_ai.input.messages``,
``gen_ai.output.messages``), for the ``otel`` plugin's content capture."""

from __future__ import annotations

from typing import Any

from think_core import StepResult

__all__ = ["assistant_parts", "input_messages", "output_message"]


def input_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Model messages in the conventions' ``gen_ai.input.messages`` shape."""
    shaped = []
    for message in messages:
        role = getattr(message, "role", None)
        if role == "user":
            parts: list[dict[str, Any]] = user_parts(message.content)
        elif role == "assistant":
            parts = assistant_parts(message.text, message.reasoning, message.tool_calls)
        elif role == "tool":
            parts = [{"type": "tool_call_response", "id": message.tool_call_id, "response": message.output}]
        else:
            continue
        shaped.append({"role": role, "parts": parts})
    return shaped


def output_message(step: StepResult) -> dict[str, Any]:
    parts = assistant_parts(step.text, step.reasoning_text, step.tool_calls)
    return {"role": "assistant", "parts": parts, "finish_reason": step.finish_reason}


def assistant_parts(text: str, reasoning: str, tool_calls: list[Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if reasoning:
        parts.append({"type": "reasoning", "content": reasoning})
    if text:
        parts.append({"type": "text", "content": text})
    parts.extend({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.input} for c in tool_calls)
    return parts


def user_parts(content: Any) -> list[dict[str, Any]]:
    """A user message's text and files; a file is named by its type (and URL), its bytes are
    not copied into the span."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.type == "text":
            parts.append({"type": "text", "content": part.text})
        elif part.url:
            parts.append({"type": "uri", "modality": part.kind, "mime_type": part.media_type, "uri": part.url})
        else:
            parts.append({"type": "blob", "modality": part.kind, "mime_type": part.media_type})
    return parts
