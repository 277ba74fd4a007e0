"""Each tool call has an idempotency key derived from the journal (session, submission, step,
call): a tool reads it from its :class:`~think_core.ToolContext`, an MCP tool sends it in the
request's ``_meta``, and a tool that honours it (``idempotent_with_key``) is run again after a
crash with the same key instead of being reported as interrupted.

The crash is real: ``bench/crash_worker.py`` with ``THINK_KEYED_RECORD`` set kills itself with
SIGKILL after ``record``'s side effect and before its result is journaled; a second worker
recovers the submission.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import make_agent
from tests.support.crash import answers, crash_worker, run_worker
from think_core import ToolContext, TurnResult, tool
from think_core.mcp import MCPServer
from think_core.mcp.config import MCPConfig
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.store import SQLiteStore
from think_core.turn.tool_calls import idempotency_key

MCP_SERVER = str(Path(__file__).resolve().parents[1] / "mcp_server.py")


def tool_parts(result: TurnResult) -> list[dict[str, Any]]:
    assert result.message is not None
    return [p for p in result.message.parts if p.get("type", "").startswith("tool-")]


def test_a_keyed_tool_killed_after_its_effect_runs_again_with_the_same_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THINK_KEYED_RECORD", "1")
    db = tmp_path / "t.db"
    run_worker(db, 2, point="tool_started", tool="record")  # SIGKILL after message 0's charge
    run_worker(db, 2)
    report = crash_worker.audit(str(db), "s", 2)
    assert report["problems"] == []
    assert (report["lost"], report["answered_twice"], report["wrong"], report["reexecuted"]) == (0, 0, 0, 0)
    assert report["interrupted"] == 0  # run again, not reported as interrupted
    assert report["effects"]["record\tmessage 0"] == 1  # the ledger: one effect
    attempts = [json.loads(line) for line in Path(f"{db}.attempts").read_text().splitlines()]
    first = [a for a in attempts if a["note"] == "message 0"]
    assert len(first) == 2 and first[0]["pid"] != first[1]["pid"]  # the dead worker, then the recovery
    assert first[0]["key"] == first[1]["key"]
    with SQLiteStore(str(db)) as store:
        submission = next(s for s in store.list_submissions("s") if s.messages[0].text == "message 0")
    # The key is the journal's position of the call: session, submission, step, call id.
    assert first[0]["key"] == idempotency_key("s", submission.submission_id, 1, "message_0_record")
    replies = answers(db)
    assert len(replies) == 2
    # (the worker loads redact, which rewrites "Answer to" as it streams)
    assert replies[0].text.endswith("Reply to message 0: lookup gave value of message 0; record gave recorded message 0.")


async def test_a_tool_reads_its_calls_context_which_the_model_does_not_see() -> None:
    seen: list[ToolContext] = []

    @tool(idempotent_with_key=True)
    def pay(amount: int, ctx: ToolContext) -> str:
        """Pay ``amount``."""
        seen.append(ctx)
        return f"paid {amount}"

    assert pay.parameters["properties"] == {"amount": {"type": "integer"}}
    assert pay.parameters["required"] == ["amount"]
    assert pay.annotations.idempotent_with_key
    model = ScriptedModel([
        Step(tool_calls=[call("pay", {"amount": 3}, id="c1"), call("pay", {"amount": 4}, id="c2")]),
        Step(text="done"),
    ])
    agent = make_agent(model, tools=[pay])
    result = await agent.session("s1").chat("pay twice")
    assert sorted(c.tool_call_id for c in seen) == ["c1", "c2"]
    for ctx in seen:
        assert (ctx.session_id, ctx.request_id, ctx.step_number, ctx.tool_name) == ("s1", result.request_id, 0, "pay")
        assert ctx.idempotency_key == idempotency_key("s1", result.request_id, 0, ctx.tool_call_id)
    assert len({c.idempotency_key for c in seen}) == 2  # one key per call
    assert all(len(c.idempotency_key) <= 64 for c in seen)


async def test_a_model_cannot_pass_a_context_of_its_own() -> None:
    @tool
    def pay(amount: int, ctx: ToolContext) -> str:
        """Pay ``amount``."""
        return ctx.idempotency_key

    model = ScriptedModel([Step(tool_calls=[call("pay", {"amount": 3, "ctx": "forged"}, id="c1")]), Step(text="ok")])
    agent = make_agent(model, tools=[pay])
    result = await agent.session("s").chat("pay")
    [part] = tool_parts(result)
    assert part["state"] == "output-error" and "ctx" in part["errorText"]


async def test_an_mcp_tool_sends_the_key_in_meta_and_the_server_charges_once() -> None:
    server = MCPServer.stdio(sys.executable, [MCP_SERVER], idempotency_keys=True)
    model = ScriptedModel([Step(tool_calls=[call("charge", {"amount": 5}, id="c1")]), Step(text="charged")])
    agent = make_agent(model, tools=[server])
    try:
        result = await agent.session("s").chat("charge me")
        key = idempotency_key("s", result.request_id, 0, "c1")
        [part] = tool_parts(result)
        assert part["output"] == {"result": f"charged 5.0 for {key}"}
        assert agent.tools["charge"].annotations.idempotent_with_key
        # The same key again (a call repeated after a crash) charges nothing more.
        await server.call_tool("charge", {"amount": 5}, meta={"think/idempotency-key": key})
        charges: Any = await server.call_tool("charges_made", {})
        assert charges == {key: 5.0}
    finally:
        await agent.aclose()


def test_think_toml_declares_a_server_that_honours_the_key() -> None:
    config = MCPConfig.model_validate({"servers": {"pay": {"command": "pay-server", "idempotency_keys": True}}})
    [server] = config.build()
    assert server.idempotency_keys is True
    assert MCPConfig.model_validate({"servers": {"x": {"command": "x"}}}).build()[0].idempotency_keys is False
