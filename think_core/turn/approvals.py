"""Tool calls a human approved run inside the continuation turn their approval started.

The order is the one of any tool call of a step: ``before_turn`` of the continuation, then
``before_step`` of its first step, then for each approved call ``before_tool_call`` (with that
turn's tools and state), execution and ``after_tool_call``, and then that step's model request,
which sees their results.
"""

from __future__ import annotations

from collections.abc import Callable

from ..messages import is_tool_part, tool_name_of
from ..models.base import ModelMessage, ToolCallRequest
from ..tools import AnyTool
from ..types import UIMessage
from .tool_calls import ToolCallRunner
from .ui_stream import AssistantMessageBuilder

__all__ = ["approved_calls", "run_approved_calls"]

MakeRunner = Callable[[AssistantMessageBuilder, frozenset[str]], ToolCallRunner]


def approved_calls(message: UIMessage) -> list[ToolCallRequest]:
    """The calls of ``message`` a human approved that have not run yet (``approval-responded``)."""
    return [
        ToolCallRequest(id=p["toolCallId"], name=tool_name_of(p), input=p.get("input") or {})
        for p in message.parts
        if is_tool_part(p) and p.get("state") == "approval-responded"
    ]


async def run_approved_calls(
    message: UIMessage,
    builder: AssistantMessageBuilder,
    make_runner: MakeRunner,
    step_number: int,
    tools: dict[str, AnyTool],
    messages: list[ModelMessage],
) -> UIMessage | None:
    """Run the approved calls of ``message`` and write their results into it; returns the
    updated message (``None`` when none was approved). ``builder`` is the turn's own when the
    turn continues ``message`` (the results stream as part of its answer)."""
    calls = approved_calls(message)
    if not calls:
        return None
    if builder.message_id != message.id:
        builder = builder.over(message)
    await make_runner(builder, frozenset(c.id for c in calls)).run_all(step_number, calls, tools, messages)
    return builder.message(message.metadata)
