"""Late joiners and the routes Cloudflare's and the AI SDK's clients expect, against a real
uvicorn server: the identity frame, ``get-messages``, the WebSocket resume handshake and
``GET /api/chat/{id}/stream`` (a turn replayed from its first chunk, then followed live),
closing frames with ``outcome`` and ``messageIds``, and a client's ``cf_agent_chat_messages``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from websockets.asyncio.client import connect

from tests.support import agents
from tests.support.web import chat_request, user
from tests.support.ws import recv, until
from think_core.models.scripted import ScriptedModel, Step
from think_core.server import create_app
from think_core.server.testing import running_server

TIMEOUT = 20.0
WORDS = " ".join(f"word{i}" for i in range(40))

make_agent = agents.make_agent.using(store=":memory:")


def slow_model() -> ScriptedModel:
    return ScriptedModel([Step(text=WORDS)], delay=0.05)


def ws_base(base: str) -> str:
    return base.replace("http://", "ws://")


async def test_identity_comes_after_the_history_and_get_messages_lists_the_transcript() -> None:
    agent = make_agent(ScriptedModel([]))
    await agent.session("s1").add_messages([user("earlier", "u0")])
    async with running_server(create_app(agent, api_token="tok")) as base:
        async with connect(f"{ws_base(base)}/agents/think/s1?token=tok") as ws:
            assert (await recv(ws))["type"] == "cf_agent_chat_messages"
            assert (await recv(ws))["type"] == "cf_agent_stream_resume_none"
            assert await recv(ws) == {"type": "cf_agent_identity", "name": "s1", "agent": "think"}
        async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
            # The same auth as the socket: the agents client derives this URL from the socket's.
            assert (await http.get("/agents/think/s1/get-messages")).status_code == 401
            listed = (await http.get("/agents/think/s1/get-messages?token=tok")).json()
            assert listed == [{"id": "u0", "role": "user", "parts": [{"type": "text", "text": "earlier"}], "metadata": None}]
            by_header = await http.get("/agents/think/s1/get-messages", headers={"Authorization": "Bearer tok"})
            assert by_header.json() == listed


async def test_a_connection_opened_mid_turn_replays_it_from_the_first_chunk_then_follows_it() -> None:
    agent = make_agent(slow_model())
    async with running_server(create_app(agent)) as base:
        url = f"{ws_base(base)}/agents/think/s1"
        async with connect(url) as first, connect(url) as idle:
            await until(first, lambda f: f["type"] == "cf_agent_identity")
            await until(idle, lambda f: f["type"] == "cf_agent_identity")
            await idle.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p0"}))
            assert await recv(idle) == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p0"}

            await first.send(json.dumps(chat_request("req1", [user("talk", "u1")])))
            live = await until(first, lambda f: f["type"] == "cf_agent_use_chat_response" and f["body"].count("delta") and f["seq"] >= 8)
            async with connect(url) as late:
                await until(late, lambda f: f["type"] == "cf_agent_identity")
                await asyncio.sleep(0.5)  # live chunks go on meanwhile: none may reach this connection
                await late.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p1"}))
                assert await recv(late) == {"type": "cf_agent_stream_resuming", "id": "req1", "probeId": "p1"}
                await late.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": "req1"}))
                frames = await until(late, lambda f: f["type"] == "cf_agent_use_chat_response" and f["done"])
            live += await until(first, lambda f: f["type"] == "cf_agent_use_chat_response" and f["done"])

    def chunks(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [json.loads(f["body"]) for f in seen if f["type"] == "cf_agent_use_chat_response" and f["body"]]

    responses = [f for f in frames if f["type"] == "cf_agent_use_chat_response"]
    # Nothing of this stream reached the late connection but its replay: seq 0, 1, 2, … in order.
    numbered = [f for f in responses if "seq" in f]
    assert [f["seq"] for f in numbered] == list(range(len(numbered)))
    replayed = [f for f in numbered if f.get("replay")]
    assert replayed and replayed[0]["seq"] == 0 and json.loads(replayed[0]["body"])["type"] == "start"
    complete = [i for i, f in enumerate(responses) if f.get("replayComplete")]
    assert complete == [len(replayed)]  # the replay ends, the live chunks follow
    assert chunks(frames) == chunks(live)  # the whole turn, as the first tab saw it
    assert "".join(c.get("delta", "") for c in chunks(frames)) == WORDS
    assert responses[-1] == {"type": "cf_agent_use_chat_response", "id": "req1", "body": "", "done": True,
                             "outcome": "completed", "messageIds": ["u1"]}


async def test_get_stream_is_204_when_idle_and_replays_a_running_turn_over_sse() -> None:
    agent = make_agent(slow_model())
    async with running_server(create_app(agent)) as base, httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        idle = await http.get("/api/chat/s1/stream")
        assert idle.status_code == 204 and idle.content == b""
        body = {"id": "s1", "messages": [user("talk", "u1")], "trigger": "submit-message"}
        async with http.stream("POST", "/api/chat", json=body) as posted:
            events: list[str] = []
            lines = posted.aiter_lines()
            async for line in lines:
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if len(events) == 10:  # mid-turn: a reloaded page asks for the stream
                    async with http.stream("GET", "/api/chat/s1/stream") as resumed:
                        assert resumed.status_code == 200
                        assert resumed.headers["x-vercel-ai-ui-message-stream"] == "v1"
                        replay = [ln[6:] async for ln in resumed.aiter_lines() if ln.startswith("data: ")]
                    break
            async for line in lines:
                if line.startswith("data: "):
                    events.append(line[6:])
        assert replay[-1] == events[-1] == "[DONE]"
        assert replay == events  # from the start chunk to the end, the same stream
        assert (await http.get("/api/chat/s1/stream")).status_code == 204


async def test_a_cancelled_turn_ends_with_outcome_aborted() -> None:
    agent = make_agent(slow_model())
    async with running_server(create_app(agent)) as base, connect(f"{ws_base(base)}/agents/think/s1") as ws:
        await until(ws, lambda f: f["type"] == "cf_agent_identity")
        await ws.send(json.dumps(chat_request("req1", [user("talk", "u1")])))
        await until(ws, lambda f: f["type"] == "cf_agent_use_chat_response" and f.get("seq", 0) >= 4)
        await ws.send(json.dumps({"type": "cf_agent_chat_request_cancel", "id": "req1"}))
        done = (await until(ws, lambda f: f["type"] == "cf_agent_use_chat_response" and f["done"]))[-1]
        assert (done["outcome"], done["messageIds"]) == ("aborted", ["u1"])


async def test_a_clients_transcript_replaces_the_stored_one_and_reaches_the_other_tabs() -> None:
    agent = make_agent(ScriptedModel([]))
    session = agent.session("s1")
    await session.add_messages([user("one", "u1"), user("two", "u2"), user("three", "u3")])
    async with running_server(create_app(agent)) as base:
        url = f"{ws_base(base)}/agents/think/s1"
        async with connect(url) as editor, connect(url) as other:
            await until(editor, lambda f: f["type"] == "cf_agent_identity")
            await until(other, lambda f: f["type"] == "cf_agent_identity")
            edited = [user("one", "u1"), user("two, edited", "u2")]
            await editor.send(json.dumps({"type": "cf_agent_chat_messages", "messages": edited}))
            seen = (await until(other, lambda f: f["type"] == "cf_agent_chat_messages"))[-1]
            assert [(m["id"], m["parts"][0]["text"]) for m in seen["messages"]] == [("u1", "one"), ("u2", "two, edited")]
            stored = await session.messages()
            assert [(m.id, m.parts[0]["text"]) for m in stored] == [("u1", "one"), ("u2", "two, edited")]
            # Refused, never ignored: a transcript that cannot be stored gets an error frame.
            await editor.send(json.dumps({"type": "cf_agent_chat_messages", "messages": [user("a", "x"), user("b", "x")]}))
            error = (await until(editor, lambda f: f["type"] == "cf_agent_error"))[-1]
            assert error["frameType"] == "cf_agent_chat_messages" and "twice" in error["error"]["message"]
            await editor.send(json.dumps({"type": "cf_agent_chat_messages", "messages": "nope"}))
            error = (await until(editor, lambda f: f["type"] == "cf_agent_error"))[-1]
            assert "must be an array" in error["error"]["message"]
        assert [m.id for m in await session.messages()] == ["u1", "u2"]
