"""A stored answer as the UI message stream chunks that build it again: what a client that asks
once more for an answer already given (or given by another process) receives, and what a
durable turn's stream log starts from after a crash."""

from __future__ import annotations

from typing import Any

from ..types import UIMessage
from .ui_stream import AssistantMessageBuilder

__all__ = ["replay_chunks"]

#: Parts whose stream chunk has their own shape (sources and files), replayed as stored.
REPLAYED_AS_THEY_ARE = frozenset({"source-url", "source-document", "file"})



def replay_chunks(message: UIMessage) -> list[dict[str, Any]]:
    """The UI message stream chunks that build the stored ``message`` again: what a client
    that asks once more for an answer already given (or given by another process) receives."""
    chunks: list[dict[str, Any]] = []
    builder = AssistantMessageBuilder(message.id, chunks.append)
    builder.start()
    for part in message.parts:
        kind = part.get("type", "")
        if kind == "step-start":
            if builder.parts:
                builder.finish_step()
            builder.start_step()
        elif part.get("hidden"):
            continue
        elif kind == "text":
            builder.text_block(part.get("text", ""))
        elif kind == "reasoning":
            builder.reasoning_block(part.get("text", ""))
        elif kind in REPLAYED_AS_THEY_ARE:
            builder.content_part(dict(part))
        elif "toolCallId" in part:
            _replay_tool(builder, part)
    if builder.parts and message.parts[0].get("type") == "step-start":
        builder.finish_step()
    builder.finish()
    return chunks


def _replay_tool(builder: AssistantMessageBuilder, part: dict[str, Any]) -> None:
    call_id, state = part["toolCallId"], part.get("state")
    name = part.get("toolName") or str(part.get("type", "")).removeprefix("tool-")
    builder.tool_input_available(call_id, name, part.get("input"), part.get("callProviderMetadata"))
    if state == "output-available":
        builder.tool_output(call_id, part.get("output"))
    elif state == "output-error":
        builder.tool_error(call_id, str(part.get("errorText") or ""))
    elif state == "approval-requested":
        approval = part.get("approval")
        reason = approval.get("requestReason") if isinstance(approval, dict) else None
        builder.tool_approval_requested(call_id, reason if isinstance(reason, str) else None)
