"""Hook contexts built by hand, for tests that call a plugin's hook directly (no turn around it)."""

from __future__ import annotations

from typing import Any

from think_core.types import ToolCallContext


def tool_ctx(tool_name: str = "search", **fields: Any) -> ToolCallContext:
    """A ``before_tool_call`` context for a call of ``tool_name`` with no session; ``fields``
    override any of its fields (``input``, ``body``, ``tool``, ``session`` …)."""
    values: dict[str, Any] = {
        "session": None,
        "request_id": "r1",
        "step_number": 0,
        "tool_call_id": "c1",
        "tool_name": tool_name,
        "input": {},
        "tool": None,
        "messages": [],
    }
    values.update(fields)
    return ToolCallContext(**values)
