"""Server chats are durable submissions, keyed by the client's message id: the same message
sent again — over HTTP or the WebSocket, while its turn runs or after it ended — gets that
turn's answer, never a second one (real uvicorn server, httpx and ``websockets`` clients, a
SQLite file)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

from tests.support import agents
from tests.support.http_chat import api, parse_sse, post_chat, transport_body
from tests.support.tools import get_weather
from tests.support.web import chat_request, roles, ui_text, user
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.server import create_app
from think_core.server.testing import running_server

TIMEOUT = 30


def durable_agent(tmp_path: Path, model: Any) -> Any:
    return agents.make_agent(model, tools=[get_weather], store=str(tmp_path / "chats.db"))


async def test_an_http_chat_is_a_submission_and_the_same_message_again_replays_its_answer(tmp_path: Path) -> None:
    model = ScriptedModel([Step(tool_calls=[call("get_weather", {"city": "Oslo"}, id="c1")]), Step(text="Sunny in Oslo.")])
    agent = durable_agent(tmp_path, model)
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("c", [user("Weather in Oslo?", "u1")], tenant="acme"))
        _, again = await post_chat(http, transport_body("c", [user("Weather in Oslo?", "u1")], tenant="acme"))
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
        [row] = (await http.get("/api/sessions/c/submissions")).json()["submissions"]
    answer = first[0]["messageId"]
    assert roles(history) == [("user", "u1"), ("assistant", answer)]
    assert (row["idempotency_key"], row["status"], row["answer_message_id"]) == ("u1", "completed", answer)
    assert row["metadata"] == {"trigger": "http", "body": {"tenant": "acme"}}
    # The replay builds the same message: same id, same text, the tool call with its result.
    assert again[0] == {"type": "start", "messageId": answer} and again[-1] == {"type": "finish"}
    assert ui_text(again) == ui_text(first) == "Sunny in Oslo."
    outputs = [c for c in again if c["type"] == "tool-output-available"]
    assert outputs == [{"type": "tool-output-available", "toolCallId": "c1", "output": {"city": "Oslo", "sky": "sunny"}}]
    assert len(model.requests) == 2  # two steps of one turn: the model was not asked again


async def test_the_same_message_sent_while_its_turn_runs_waits_for_that_turn(tmp_path: Path) -> None:
    model = ScriptedModel([Step(text="one two three four five six seven eight")], delay=0.1)
    agent = durable_agent(tmp_path, model)
    async with api(agent) as http:
        body = transport_body("c", [user("hello", "u1")])
        first = asyncio.create_task(http.post("/api/chat", json=body))
        while not await agent.session("c").list_submissions(status="running"):
            await asyncio.sleep(0.02)
        second = await http.post("/api/chat", json=body)
        first_chunks, second_chunks = parse_sse((await first).text), parse_sse(second.text)
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
    assert ui_text(first_chunks) == ui_text(second_chunks) == "one two three four five six seven eight"
    assert first_chunks[0] == second_chunks[0]  # the same answer message
    assert roles(history) == [("user", "u1"), ("assistant", first_chunks[0]["messageId"])]
    assert len(model.requests) == 1


async def test_a_websocket_chat_sent_again_with_a_new_request_id_gets_the_same_answer(tmp_path: Path) -> None:
    agent = durable_agent(tmp_path, ScriptedModel([Step(text="Only once.")]))
    async with running_server(create_app(agent)) as base:
        url = f"{base.replace('http://', 'ws://')}/agents/think/w"
        async with connect(url) as ws:

            async def stream(request_id: str) -> list[dict[str, Any]]:
                await ws.send(json.dumps(chat_request(request_id, [user("hi", "u1")])))
                chunks: list[dict[str, Any]] = []
                while True:
                    frame = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
                    if frame.get("type") == "cf_agent_use_chat_response" and frame["id"] == request_id:
                        if frame["done"]:
                            return chunks
                        chunks.append(json.loads(frame["body"]))

            first = await stream("r1")
            again = await stream("r2")
        async with httpx.AsyncClient(base_url=base) as http:
            history = (await http.get("/api/sessions/w/messages")).json()["messages"]
            [row] = (await http.get("/api/sessions/w/submissions")).json()["submissions"]
    assert ui_text(first) == ui_text(again) == "Only once."
    assert again[0] == first[0]
    assert roles(history) == [("user", "u1"), ("assistant", first[0]["messageId"])]
    assert (row["idempotency_key"], row["metadata"]["trigger"]) == ("u1", "websocket")


async def test_a_stored_message_answered_outside_a_submission_is_replayed_not_answered_again(tmp_path: Path) -> None:
    agent = durable_agent(tmp_path, ScriptedModel([Step(text="Answered by chat().")]))
    result = await agent.session("c").chat(user_message := "hi")
    assert result.text == "Answered by chat()."
    [stored_user, stored_answer] = await agent.session("c").messages()
    async with api(agent) as http:
        resend = {"id": stored_user.id, "role": "user", "parts": [{"type": "text", "text": user_message}]}
        _, chunks = await post_chat(http, transport_body("c", [resend]))
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
    assert chunks[0] == {"type": "start", "messageId": stored_answer.id} and ui_text(chunks) == "Answered by chat()."
    assert [m["id"] for m in history] == [stored_user.id, stored_answer.id]


async def test_a_websocket_chat_cancelled_while_waiting_for_its_turn_never_runs(tmp_path: Path) -> None:
    model = ScriptedModel([Step(text="one two three four five six seven eight nine ten")], delay=0.1)
    agent = durable_agent(tmp_path, model)
    async with running_server(create_app(agent)) as base:
        async with connect(f"{base.replace('http://', 'ws://')}/agents/think/w") as ws:
            await ws.send(json.dumps(chat_request("r1", [user("first", "u1")])))
            while not await agent.session("w").list_submissions(status="running"):
                await asyncio.sleep(0.02)
            await ws.send(json.dumps(chat_request("r2", [user("second", "u2")])))
            while len(await agent.session("w").list_submissions()) < 2:
                await asyncio.sleep(0.02)
            await ws.send(json.dumps({"type": "cf_agent_chat_request_cancel", "id": "r2"}))
            done: set[str] = set()
            while done != {"r1", "r2"}:
                frame = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
                if frame.get("type") == "cf_agent_use_chat_response" and frame["done"]:
                    done.add(frame["id"])
        rows = {r.idempotency_key: r for r in await agent.session("w").list_submissions()}
        history = await agent.session("w").messages()
    assert (rows["u1"].status, rows["u2"].status) == ("completed", "aborted")
    assert [(m.role, m.id) for m in history] == [("user", "u1"), ("assistant", rows["u1"].answer_message_id)]
    assert len(model.requests) == 1
