"""Approval on a plugin's word, after the guards (against the OpenAI wire on a loopback server):
``ask(reason)`` holds a call until a human approves it, showing the reason; ``before_tool_call``
runs before anyone is asked, so a block never interrupts a person and a rewrite is what the
person approves and what runs."""

from __future__ import annotations

import json
from typing import Any

from tests.loopback import LoopbackServer, Reply
from tests.support.wire import oa_text, oa_tool_call, openai_model
from think_core import ToolCallContext, allow, ask, block, hookimpl, tool
from think_core.agent import Think

paid: list[dict[str, Any]] = []


@tool
def pay(to: str, amount: float) -> str:
    """Pay someone."""
    paid.append({"to": to, "amount": amount})
    return f"paid {amount} to {to}"


@tool(needs_approval=True)
def wire(to: str, amount: float) -> str:
    """Wire money (always needs a human)."""
    paid.append({"wire": to, "amount": amount})
    return f"wired {amount} to {to}"


class BigPaymentsAsk:
    name = "payments_policy"

    @hookimpl
    def before_tool_call(self, ctx: ToolCallContext) -> Any:
        if ctx.tool_name == "pay" and ctx.input["amount"] > 100:
            return ask(f"payments over 100 need a human ({ctx.input['amount']:g})")
        return None


def tool_part(message: Any, call_id: str) -> dict[str, Any]:
    return next(p for p in message.parts if p.get("toolCallId") == call_id)


async def test_ask_holds_the_call_until_approved_and_shows_the_reason() -> None:
    paid.clear()
    async with LoopbackServer() as provider:
        provider.enqueue(
            Reply.sse(oa_tool_call("call_1", "pay", '{"to": "bob", "amount": 250}')),
            Reply.sse(oa_text("Paid.")),
            Reply.sse(oa_tool_call("call_2", "pay", '{"to": "bob", "amount": 5}')),
            Reply.sse(oa_text("Small one paid.")),
        )
        think = Think(openai_model(provider), tools=[pay], plugins=[BigPaymentsAsk()], load_entrypoints=False)
        async with think:
            session = think.session("s")
            events = [chunk async for chunk in session.stream("pay bob 250")]
            assert paid == []  # held
            [request] = [c for c in events if c["type"] == "tool-approval-request"]
            assert request == {"type": "tool-approval-request", "approvalId": "call_1", "toolCallId": "call_1",
                               "reason": "payments over 100 need a human (250)"}
            [asked] = [m for m in await session.messages() if m.role == "assistant"]
            part = tool_part(asked, "call_1")
            assert part["state"] == "approval-requested"
            assert part["approval"] == {"id": "call_1", "requestReason": "payments over 100 need a human (250)"}
            assert asked.metadata["decisions"]["call_1"] == {
                "decision": "ask", "by": "payments_policy", "reason": "payments over 100 need a human (250)",
            }
            result = await session.approve_tool_call("call_1", True)
            assert result is not None and result.text == "Paid."
            assert paid == [{"to": "bob", "amount": 250}]
            small = await session.chat("pay bob 5")  # under the policy's limit: no one is asked
            assert small.text == "Small one paid." and paid[-1] == {"to": "bob", "amount": 5}
    assert len(provider.requests) == 4


async def test_a_denied_ask_never_runs_and_the_model_reads_the_denial() -> None:
    paid.clear()
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_tool_call("call_1", "pay", '{"to": "eve", "amount": 900}')), Reply.sse(oa_text("OK, not paid.")))
        think = Think(openai_model(provider), tools=[pay], plugins=[BigPaymentsAsk()], load_entrypoints=False)
        async with think:
            session = think.session("s")
            await session.chat("pay eve 900")
            result = await session.approve_tool_call("call_1", False, reason="not this one")
            assert result is not None and result.text == "OK, not paid."
    assert paid == []
    assert "not this one" in json.dumps(provider.requests[1].json["messages"])


async def test_a_guards_block_on_a_needs_approval_tool_means_no_one_is_asked() -> None:
    paid.clear()

    class NoWiresToEve:
        @hookimpl
        def before_tool_call(self, ctx: ToolCallContext) -> Any:
            return block("wires to eve are not allowed") if ctx.input.get("to") == "eve" else None

    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_tool_call("call_1", "wire", '{"to": "eve", "amount": 10}')), Reply.sse(oa_text("Blocked.")))
        think = Think(openai_model(provider), tools=[wire], plugins=[NoWiresToEve()], load_entrypoints=False)
        async with think:
            session = think.session("s")
            events = [chunk async for chunk in session.stream("wire eve 10")]
            stored = await session.messages()
    assert not [c for c in events if c["type"] == "tool-approval-request"]
    part = tool_part(stored[-1], "call_1")
    assert part["state"] == "output-available" and part["output"] == "wires to eve are not allowed"
    assert "approval" not in part and paid == []
    assert [m.role for m in stored] == ["user", "assistant"] and stored[-1].parts[-1]["text"] == "Blocked."


async def test_a_rewrite_is_what_the_human_approves_and_what_runs() -> None:
    paid.clear()

    class CapWires:
        @hookimpl
        def before_tool_call(self, ctx: ToolCallContext) -> Any:
            if ctx.input["amount"] > 50:
                return allow({**ctx.input, "amount": 50})
            return None

    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_tool_call("call_1", "wire", '{"to": "bob", "amount": 80}')), Reply.sse(oa_text("Wired 50.")))
        think = Think(openai_model(provider), tools=[wire], plugins=[CapWires()], load_entrypoints=False)
        async with think:
            session = think.session("s")
            events = [chunk async for chunk in session.stream("wire bob 80")]
            shown = [c["input"] for c in events if c["type"] == "tool-input-available"]
            assert shown == [{"to": "bob", "amount": 80}, {"to": "bob", "amount": 50}]  # the rewrite is shown
            [asked] = [m for m in await session.messages() if m.role == "assistant"]
            assert tool_part(asked, "call_1")["input"] == {"to": "bob", "amount": 50}
            result = await session.approve_tool_call("call_1", True)
            assert result is not None and result.text == "Wired 50."
    assert paid == [{"wire": "bob", "amount": 50}]


async def test_an_approvals_continuation_has_the_body_of_the_turn_it_continues_not_an_earlier_ones() -> None:
    """An earlier turn's body (a read-only switch) must not leak into a later answer's approval."""
    paid.clear()
    bodies: list[Any] = []

    class Bodies:
        @hookimpl
        def before_turn(self, ctx: Any) -> None:
            bodies.append(ctx.body)

    async with LoopbackServer() as provider:
        provider.enqueue(
            Reply.sse(oa_text("Read-only noted.")),
            Reply.sse(oa_tool_call("call_1", "wire", '{"to": "bob", "amount": 5}')),
            Reply.sse(oa_text("Wired.")),
        )
        think = Think(openai_model(provider), tools=[wire], plugins=[Bodies()], load_entrypoints=False)
        async with think:
            session = think.session("s")
            await session.chat("look only", body={"read_only": True})
            await session.chat("wire bob 5")
            result = await session.approve_tool_call("call_1", True)
            assert result is not None and result.text == "Wired."
    assert bodies == [{"read_only": True}, None, None]
    assert paid == [{"wire": "bob", "amount": 5}]
