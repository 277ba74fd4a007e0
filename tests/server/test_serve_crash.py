"""``think serve`` SIGKILLed in the middle of a chat and started again on the same ``--db``:
the chat's turn completes on its own — no client sends anything again — and the history holds
the user's message once and exactly one answer (real server processes, real HTTP and
WebSocket clients)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.loopback import LoopbackServer, RecordedRequest, Reply
from tests.support.serve import think_serve as serve
from tests.support.web import chat_request, user
from tests.support.wire import oa_text, oa_tool_call
from think_core.cli.demo_model import INTRODUCTION
from think_core.server.testing import wait_until_healthy

DEADLINE = 60  # seconds: generous, the machine may be busy; nothing here is timed


def demo_server(db: str) -> Any:
    return serve("--model", "demo", "--db", db, deadline=DEADLINE)


async def final_submissions(http: httpx.AsyncClient, session: str, what: str) -> list[dict[str, Any]]:
    """The session's submissions once none is pending or running (a restarted server resumes them)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while True:
        rows: list[dict[str, Any]] = (await http.get(f"/api/sessions/{session}/submissions")).json()["submissions"]
        if all(r["status"] not in ("pending", "running") for r in rows):
            return rows
        assert loop.time() < deadline, f"{what} was not resumed: {rows}"
        await asyncio.sleep(0.2)


async def start_http_chat(base: str) -> asyncio.Task[Any]:
    """Post a chat; return once its answer has begun to stream, with the task still reading it."""
    body = {"id": "crash", "messages": [user("Who are you?", "u1")], "trigger": "submit-message"}
    client = httpx.AsyncClient(base_url=base, timeout=DEADLINE)
    started = asyncio.get_running_loop().create_future()

    async def read() -> None:
        try:
            async with client.stream("POST", "/api/chat", json=body) as response:
                async for line in response.aiter_lines():
                    if '"text-delta"' in line and not started.done():
                        started.set_result(None)
        except httpx.HTTPError:
            pass  # the server was killed under it
        finally:
            await client.aclose()

    reader = asyncio.create_task(read())
    await asyncio.wait_for(started, DEADLINE)
    return reader


async def start_websocket_chat(base: str) -> asyncio.Task[Any]:
    """Send a chat frame; return once its answer has begun to stream, with a task closing the socket."""
    ws = await connect(f"{base.replace('http://', 'ws://')}/agents/think/crash")
    await ws.send(json.dumps(chat_request("r1", [user("Who are you?", "u1")])))
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), DEADLINE))
        if frame.get("type") == "cf_agent_use_chat_response" and '"text-delta"' in frame.get("body", ""):
            break
    return asyncio.create_task(ws.close())


@pytest.mark.parametrize("start_chat", [start_http_chat, start_websocket_chat], ids=["http", "websocket"])
async def test_a_chat_cut_off_by_sigkill_is_answered_after_the_restart(db: str, start_chat: Any) -> None:
    async with demo_server(db) as (proc, base):
        async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
            await wait_until_healthy(http, timeout=DEADLINE)
        client = await start_chat(base)
        proc.send_signal(signal.SIGKILL)  # mid-answer: the demo streams a word every 50 ms
        assert await proc.wait() == -signal.SIGKILL
    await asyncio.gather(client, return_exceptions=True)  # the client gives up; it never comes back

    async with demo_server(db) as (_, base), httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
        await wait_until_healthy(http, timeout=DEADLINE)
        [row] = await final_submissions(http, "crash", "the interrupted chat")
        messages = (await http.get("/api/sessions/crash/messages")).json()["messages"]

    assert row["status"] == "completed" and row["idempotency_key"] == "u1"
    assert [(m["role"], m["id"]) for m in messages] == [("user", "u1"), ("assistant", row["answer_message_id"])]
    answer = "".join(p.get("text", "") for p in messages[1]["parts"])
    assert answer == INTRODUCTION  # one whole answer, not the cut-off start plus another


def invoice_model(request: RecordedRequest) -> Reply:
    """Step one asks to send an invoice; the step after its result says what came back."""
    messages = request.json["messages"]
    if messages[-1]["role"] == "tool":
        return Reply.sse(oa_text("Done: ", str(messages[-1]["content"]), "."))
    return Reply.sse(oa_tool_call("call_inv", "send_invoice", json.dumps({"customer": "acme"})))


def invoice_server(db: str, llm: LoopbackServer, ledger: Path, *, hang: bool) -> Any:
    env = {**os.environ, "THINK_TEST_LEDGER": str(ledger)}
    env.pop("THINK_TEST_HANG_AFTER_SEND", None)
    if hang:
        env["THINK_TEST_HANG_AFTER_SEND"] = "1"
    return serve("--model", f"openai-compatible:m@{llm.url}/v1", "--db", db, "--no-plugins", "--no-timeline",
                 "--tools", "tests.support.ledger_tools:APPROVAL_TOOLS", env=env, deadline=DEADLINE)


async def test_an_approved_call_cut_off_by_sigkill_is_not_sent_twice_and_its_continuation_ends(
    db: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    async with LoopbackServer(handler=invoice_model) as llm:
        async with invoice_server(db, llm, ledger, hang=True) as (proc, base):
            async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
                await wait_until_healthy(http, timeout=DEADLINE)
                body = {"id": "inv", "messages": [user("Invoice acme", "u1")], "trigger": "submit-message"}
                await http.post("/api/chat", json=body)  # ends at the approval request
                [_, waiting] = (await http.get("/api/sessions/inv/messages")).json()["messages"]
                approved = {**waiting, "parts": [
                    dict(p, state="approval-responded", approval={"id": p["toolCallId"], "approved": True})
                    if "toolCallId" in p else p for p in waiting["parts"]]}
                body["messages"] = [user("Invoice acme", "u1"), approved]
                continuation = asyncio.create_task(http.post("/api/chat", json=body))
                loop = asyncio.get_running_loop()
                deadline = loop.time() + DEADLINE
                while not (ledger.exists() and ledger.read_text()):  # the invoice went out; its result is not stored
                    assert loop.time() < deadline, "the approved call never ran"
                    await asyncio.sleep(0.05)
                proc.send_signal(signal.SIGKILL)
                assert await proc.wait() == -signal.SIGKILL
                await asyncio.gather(continuation, return_exceptions=True)

        async with invoice_server(db, llm, ledger, hang=False) as (_, base):
            async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
                await wait_until_healthy(http, timeout=DEADLINE)
                rows = await final_submissions(http, "inv", "the continuation")
                messages = (await http.get("/api/sessions/inv/messages")).json()["messages"]

    assert len(ledger.read_text().splitlines()) == 1  # sent once: never again after the restart
    assert [(r["idempotency_key"], r["status"]) for r in rows] == [
        ("u1", "completed"), (f"continue:{waiting['id']}:call_inv", "completed")]
    assert [(m["role"], m["id"]) for m in messages] == [("user", "u1"), ("assistant", waiting["id"])]
    [call_part] = [p for p in messages[1]["parts"] if p.get("toolCallId") == "call_inv"]
    assert call_part["state"] == "output-error" and "interrupted" in call_part["errorText"]
    assert "".join(p.get("text", "") for p in messages[1]["parts"]).startswith("Done: ")


async def test_a_regeneration_cut_off_by_sigkill_replaces_the_answer_once_after_the_restart(db: str) -> None:
    async with demo_server(db) as (proc, base):
        async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
            await wait_until_healthy(http, timeout=DEADLINE)
            await http.post("/api/chat", json={"id": "regen", "messages": [user("Who are you?", "u1")],
                                               "trigger": "submit-message"})
            [_, old] = (await http.get("/api/sessions/regen/messages")).json()["messages"]
        body = {"id": "regen", "messages": [user("Who are you?", "u1")], "trigger": "regenerate-message",
                "messageId": old["id"]}
        started = asyncio.get_running_loop().create_future()

        async def regenerate() -> None:
            try:
                async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as client:
                    async with client.stream("POST", "/api/chat", json=body) as response:
                        async for line in response.aiter_lines():
                            if '"text-delta"' in line and not started.done():
                                started.set_result(None)
            except httpx.HTTPError:
                pass  # the server was killed under it

        reader = asyncio.create_task(regenerate())
        await asyncio.wait_for(started, DEADLINE)
        proc.send_signal(signal.SIGKILL)  # mid-answer: the old answer is gone, the new one half-written
        assert await proc.wait() == -signal.SIGKILL
    await asyncio.gather(reader, return_exceptions=True)

    async with demo_server(db) as (_, base), httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
        await wait_until_healthy(http, timeout=DEADLINE)
        rows = await final_submissions(http, "regen", "the regeneration")
        messages = (await http.get("/api/sessions/regen/messages")).json()["messages"]

    assert [(r["idempotency_key"], r["status"]) for r in rows] == [("u1", "completed"), (f"regenerate:{old['id']}", "completed")]
    assert [(m["role"], m["id"]) for m in messages] == [("user", "u1"), ("assistant", rows[1]["answer_message_id"])]
    assert messages[1]["id"] != old["id"]  # the old answer was replaced, by one whole new one
    assert "".join(p.get("text", "") for p in messages[1]["parts"]) == INTRODUCTION
