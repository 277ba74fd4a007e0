"""An approved tool call runs inside the continuation its approval starts: ``before_turn``,
``before_step``, then ``before_tool_call`` (with that turn's tools and state: it also ran before
the human was asked), execution, ``after_tool_call``, and then the model step that sees the
result."""

from __future__ import annotations

from typing import Any

from tests.recorder import Recorder
from think_core import hookimpl, tool
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call

ran: list[str] = []


@tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (needs a human's approval)."""
    ran.append(path)
    return f"deleted {path}"


@tool
def list_files() -> str:
    """List the files."""
    return "x"


class TurnState(Recorder):
    """Marks each turn in the session state; the continuation narrows the tools to delete_file."""

    @hookimpl
    def before_turn(self, ctx: Any) -> dict[str, Any] | None:
        super().before_turn(ctx)
        ctx.session.state["turn"] = "continuation" if ctx.continuation else "first"
        return {"activeTools": ["delete_file"]} if ctx.continuation else None

    @hookimpl
    def before_tool_call(self, ctx: Any) -> None:
        super().before_tool_call(ctx)
        self.state_at_decision = ctx.session.state["turn"]


async def test_the_approved_call_is_decided_and_run_inside_the_continuation_turn() -> None:
    ran.clear()
    rec = TurnState()
    model = ScriptedModel([Step(tool_calls=[call("delete_file", {"path": "/tmp/x"})]), "Deleted."])
    agent = Think(model, tools=[delete_file, list_files], plugins=[rec], load_entrypoints=False)
    try:
        session = agent.session("s")
        first = await session.chat("delete it")
        call_id = first.message.parts[-1]["toolCallId"]
        rec.calls.clear()
        result = await session.approve_tool_call(call_id, True, body={"approver": "ana"})
        assert result.status == "completed" and result.text == "Deleted." and result.continuation
        assert ran == ["/tmp/x"]
        order = [h for h in rec.names() if h != "on_chunk"]
        assert order[:5] == ["before_turn", "before_step", "before_tool_call", "after_tool_call", "on_step_finish"]
        assert order[-1] == "on_chat_response"
        assert rec.state_at_decision == "continuation"  # the continuation's before_turn had run
        # Decided twice: before the human was asked (in the first turn), and again when the
        # approved call runs, with the continuation's state.
        asked, decision = rec.contexts["before_tool_call"]
        assert asked.tool_call_id == call_id == decision.tool_call_id and decision.step_number == 0
        assert asked.body is None
        assert decision.body == {"approver": "ana"} == rec.contexts["before_turn"][-1].body
        # The model step of the continuation comes after the call and sees its result, with the
        # continuation's active tools.
        second = model.requests[1]
        assert [t.name for t in second.tools] == ["delete_file"]
        tool_message = second.messages[-1]
        assert tool_message.role == "tool" and tool_message.output == "deleted /tmp/x"
        [stored] = [m for m in await session.messages() if m.id == first.message.id]
        part = next(p for p in stored.parts if p.get("toolCallId") == call_id)
        assert part["state"] == "output-available" and part["output"] == "deleted /tmp/x"
    finally:
        await agent.aclose()


async def test_an_approved_call_outside_the_continuations_active_tools_is_not_run() -> None:
    """The continuation's ``active_tools`` govern the approved call as they govern any call."""
    ran.clear()

    class Narrow:
        @hookimpl
        def before_turn(self, ctx: Any) -> dict[str, Any] | None:
            return {"activeTools": ["list_files"]} if ctx.continuation else None

    model = ScriptedModel([Step(tool_calls=[call("delete_file", {"path": "/tmp/y"})]), "Could not delete."])
    agent = Think(model, tools=[delete_file, list_files], plugins=[Narrow()], load_entrypoints=False)
    try:
        session = agent.session("s")
        first = await session.chat("delete it")
        result = await session.approve_tool_call(first.message.parts[-1]["toolCallId"], True)
        assert result.status == "completed" and ran == []
        tool_message = model.requests[1].messages[-1]
        assert tool_message.role == "tool" and tool_message.is_error and "Unknown tool 'delete_file'" in tool_message.output
    finally:
        await agent.aclose()
