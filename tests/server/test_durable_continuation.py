"""A chat request that answers the calls an answer left waiting — a human's approval, a client
tool's result — is a durable submission too: a continuation keyed by the message and the calls
it answers. It is recorded before its turn runs, its approved calls run in its journal, and the
same answers sent again follow or replay that continuation instead of running another (real
uvicorn server and httpx client, a SQLite file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support import agents
from tests.support.http_chat import api, post_chat, transport_body
from tests.support.web import ui_text, user
from think_core import Tool, tool
from think_core.models.scripted import ScriptedModel, Step, call

SENT: list[str] = []


@tool(needs_approval=True)
def send_invoice(customer: str) -> str:
    """Send an invoice (a human approves each one first)."""
    SENT.append(customer)
    return f"invoice sent to {customer}"


def answered(message: dict[str, Any], **part_fields: Any) -> dict[str, Any]:
    """The client's copy of ``message`` with its tool part answered."""
    parts = [dict(p, **part_fields) if "toolCallId" in p else p for p in message["parts"]]
    return {**message, "parts": parts}


async def test_an_approval_continues_as_a_submission_and_the_same_approval_again_runs_nothing(tmp_path: Path) -> None:
    SENT.clear()
    model = ScriptedModel([Step(tool_calls=[call("send_invoice", {"customer": "acme"}, id="c1")]), Step(text="Sent.")])
    agent = agents.make_agent(model, tools=[send_invoice], store=str(tmp_path / "c.db"))
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("s", [user("Invoice acme", "u1")]))
        assert [c for c in first if c["type"] == "tool-approval-request"] == [
            {"type": "tool-approval-request", "approvalId": "c1", "toolCallId": "c1"}]
        [_, waiting] = (await http.get("/api/sessions/s/messages")).json()["messages"]
        approval = answered(waiting, state="approval-responded", approval={"id": "c1", "approved": True})
        transcript = [user("Invoice acme", "u1"), approval]

        _, continued = await post_chat(http, transport_body("s", transcript))
        _, again = await post_chat(http, transport_body("s", transcript))
        history = (await http.get("/api/sessions/s/messages")).json()["messages"]
        rows = (await http.get("/api/sessions/s/submissions")).json()["submissions"]

    assert SENT == ["acme"] and len(model.requests) == 2  # the approved call ran once, the model answered once
    assert continued[0] == {"type": "start", "messageId": waiting["id"]}  # it continues the waiting message
    assert ui_text(continued) == "Sent."
    assert [c["output"] for c in continued if c["type"] == "tool-output-available"] == ["invoice sent to acme"]
    assert ui_text(again) == "Sent."  # the stored answer, replayed
    assert [(m["role"], m["id"]) for m in history] == [("user", "u1"), ("assistant", waiting["id"])]
    keys = [(r["idempotency_key"], r["status"]) for r in rows]
    assert keys == [("u1", "completed"), (f"continue:{waiting['id']}:c1", "completed")]
    assert rows[1]["metadata"]["trigger"] == "auto_continue"
    assert rows[1]["metadata"]["answers"] == [{"tool_call_id": "c1", "approved": True}]
    assert rows[1]["answer_message_id"] == waiting["id"]


async def test_a_client_tool_result_continues_as_a_submission(tmp_path: Path) -> None:
    pick = Tool.client("pick_color", "Ask the user for a color.")
    model = ScriptedModel([Step(tool_calls=[call("pick_color", {}, id="c1")]), Step(text="Blue it is.")])
    agent = agents.make_agent(model, tools=[pick], store=str(tmp_path / "c.db"))
    async with api(agent) as http:
        await post_chat(http, transport_body("s", [user("Pick a color", "u1")]))
        [_, waiting] = (await http.get("/api/sessions/s/messages")).json()["messages"]
        result = answered(waiting, state="output-available", output="blue")
        _, continued = await post_chat(http, transport_body("s", [user("Pick a color", "u1"), result]))
        rows = (await http.get("/api/sessions/s/submissions")).json()["submissions"]
        history = (await http.get("/api/sessions/s/messages")).json()["messages"]
    assert ui_text(continued) == "Blue it is." and len(model.requests) == 2
    assert [(r["idempotency_key"], r["status"]) for r in rows][1] == (f"continue:{waiting['id']}:c1", "completed")
    parts = {p["toolCallId"]: (p["state"], p.get("output")) for p in history[1]["parts"] if "toolCallId" in p}
    assert parts == {"c1": ("output-available", "blue")}


async def test_answers_that_leave_a_call_waiting_are_recorded_without_a_submission(tmp_path: Path) -> None:
    pick = Tool.client("pick", "Pick.")
    model = ScriptedModel([Step(tool_calls=[call("pick", {}, id="c1"), call("pick", {}, id="c2")])])
    agent = agents.make_agent(model, tools=[pick], store=str(tmp_path / "c.db"))
    async with api(agent) as http:
        await post_chat(http, transport_body("s", [user("Pick two", "u1")]))
        [_, waiting] = (await http.get("/api/sessions/s/messages")).json()["messages"]
        parts = [dict(p, state="output-available", output=1) if p.get("toolCallId") == "c1" else p for p in waiting["parts"]]
        await http.post("/api/chat", json=transport_body("s", [user("Pick two", "u1"), {**waiting, "parts": parts}]))
        rows = (await http.get("/api/sessions/s/submissions")).json()["submissions"]
    assert [r["idempotency_key"] for r in rows] == ["u1"] and len(model.requests) == 1
