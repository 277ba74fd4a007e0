"""The bundled ``budget`` plugin against a loopback OpenAI server and real stores: a session
over its budget is refused before any model request, a turn crossing a limit ends after that
step, and two agents on one store (SQLite and PostgreSQL) share what the session spent."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from tests.loopback import LoopbackServer, Reply
from tests.support.wire import oa_text, oa_tool_call, openai_model
from think_core import tool
from think_core.agent import Think
from think_plugins.budget import Budget

ran: list[str] = []


@tool
def pay(amount: int) -> str:
    """Pay an amount."""
    ran.append(f"pay {amount}")
    return "paid"


def budget_agent(server: LoopbackServer, store: str = ":memory:", **settings: Any) -> Think:
    return Think(openai_model(server), store=store, load_entrypoints=False, tools=[pay],
                 plugins=[Budget(settings)], retry={"max_retries": 0})


async def test_a_session_over_its_tokens_is_refused_before_any_model_request(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(oa_text("First answer.", usage=(10, 5))))
    agent = budget_agent(loopback, session_tokens=15)
    try:
        session = agent.session("s")
        first = await session.chat("one")
        second = await session.chat("two")
        messages = await session.messages()
    finally:
        await agent.aclose()
    assert first.status == "completed" and first.usage.total_tokens == 15
    assert len(loopback.requests) == 1  # the second turn never reached the model
    assert second.status == "error" and "session_tokens budget exhausted" in (second.error or "")
    assert "15 of 15 tokens" in (second.error or "")
    assert [(m.role, m.text) for m in messages] == [("user", "one"), ("assistant", "First answer."), ("user", "two")]
    assert messages[1].metadata is not None and messages[1].metadata["usage"]["gpt-4o"]["total_tokens"] == 15


async def test_a_session_over_its_dollars_is_refused(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(oa_text("Costly.", usage=(1000, 500))))
    prices = {"gpt-4": {"input": 1000.0, "output": 2000.0}}  # prefix of gpt-4o: $1 + $1
    agent = budget_agent(loopback, session_usd=2.0, prices=prices)
    try:
        session = agent.session("s")
        assert (await session.chat("one")).status == "completed"
        second = await session.chat("two")
    finally:
        await agent.aclose()
    assert len(loopback.requests) == 1
    assert second.status == "error" and "session_usd budget exhausted" in (second.error or "")


async def test_under_budget_turns_run(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(oa_text("a", usage=(10, 5))), Reply.sse(oa_text("b", usage=(10, 5))))
    agent = budget_agent(loopback, session_tokens=31, turn_tokens=16)
    try:
        session = agent.session("s")
        results = [await session.chat("one"), await session.chat("two")]
    finally:
        await agent.aclose()
    assert [r.status for r in results] == ["completed", "completed"]


async def test_a_turn_crossing_its_limit_ends_after_that_step(loopback: LoopbackServer) -> None:
    ran.clear()
    loopback.enqueue(Reply.sse(oa_tool_call("call_1", "pay", '{"amount": 5}', usage=(20, 8))),
                     Reply.sse(oa_text("Should not be asked.")))
    agent = budget_agent(loopback, turn_tokens=25)
    try:
        session = agent.session("s")
        result = await session.chat("pay five")
        messages = await session.messages()
    finally:
        await agent.aclose()
    assert len(loopback.requests) == 1  # no step after the one that crossed the limit
    assert ran == []  # its tool call was answered, not run
    assert result.status == "error" and "turn_tokens budget exhausted" in (result.error or "")
    assert "28 of 25 tokens" in (result.error or "")
    user, answer = messages
    assert user.text == "pay five"
    [call] = [p for p in answer.parts if p.get("toolCallId") == "call_1"]
    assert "budget exhausted" in str(call.get("output") or call.get("errorText"))
    assert answer.metadata is not None and answer.metadata["usage"]["gpt-4o"]["total_tokens"] == 28


async def test_two_agents_on_one_store_share_the_session_budget(loopback: LoopbackServer, db: str) -> None:
    loopback.enqueue(Reply.sse(oa_text("From the first.", usage=(10, 5))))
    first = budget_agent(loopback, db, session_tokens=15)
    second = budget_agent(loopback, db, session_tokens=15)
    try:
        done = await first.session("shared").chat("one")
        refused = await second.session("shared").chat("two")
        spent = await second.session("shared").usage()
    finally:
        await first.aclose()
        await second.aclose()
    assert done.status == "completed"
    assert refused.status == "error" and "session_tokens budget exhausted" in (refused.error or "")
    assert len(loopback.requests) == 1
    assert spent.total.total_tokens == 15 and set(spent.by_model) == {"gpt-4o"}


#: The first turn, run by another process: the same agent set-up on the same store.
OTHER_PROCESS = """
import asyncio, sys
from think_core.agent import Think
from think_core.models.openai import OpenAIChatModel
from think_plugins.budget import Budget

async def main(url, store):
    model = OpenAIChatModel("gpt-4o", base_url=url + "/v1", api_key="sk-test")
    agent = Think(model, store=store, load_entrypoints=False, plugins=[Budget({"session_tokens": 15})],
                  retry={"max_retries": 0})
    try:
        result = await agent.session("shared").chat("one")
    finally:
        await agent.aclose()
    print(result.status)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_two_processes_on_one_store_share_the_session_budget(loopback: LoopbackServer, db: str) -> None:
    """What one process spent is read by another from the store: its turn is refused."""
    loopback.enqueue(Reply.sse(oa_text("From the other process.", usage=(10, 5))))
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-c", OTHER_PROCESS, loopback.url, db,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "THINK_PLUGINS": ""},
    )
    out, err = await asyncio.wait_for(other.communicate(), 120)
    assert other.returncode == 0 and out.decode().split() == ["completed"], err.decode()[-2000:]
    here = budget_agent(loopback, db, session_tokens=15)
    try:
        refused = await here.session("shared").chat("two")
        messages = await here.session("shared").messages()
    finally:
        await here.aclose()
    assert refused.status == "error" and "session_tokens budget exhausted" in (refused.error or "")
    assert len(loopback.requests) == 1  # only the other process's turn reached the model
    assert [m.role for m in messages][-1] == "user"  # the refused turn's message is kept
