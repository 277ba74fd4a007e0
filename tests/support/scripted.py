"""What a ``ScriptedModel`` was sent: the tool results in its last request."""

from __future__ import annotations

from typing import Any

from think_core.models.base import ToolMessage
from think_core.models.scripted import ScriptedModel


def tool_results(model: ScriptedModel) -> dict[str, ToolMessage]:
    """The last request's tool messages by tool name (the last one of a name wins)."""
    return {m.tool_name: m for m in model.requests[-1].messages if isinstance(m, ToolMessage)}


def tool_outputs(model: ScriptedModel) -> list[Any]:
    """Every tool output in the last request (history included), in order."""
    return [m.output for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
