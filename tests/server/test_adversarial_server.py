"""Adversarial tests of the server (real uvicorn, real ``websockets`` / ``httpx`` clients):
binary, enormous and non-object WebSocket frames, tool results aimed at another session's calls,
connections that come and go while a turn streams, and ``POST /api/chat`` bodies of the wrong
shape. "Bad frames get an error frame, never a dropped server"; nothing accepted may be lost.

``xfail(strict=True, reason="BUG: ...")`` marks a real violation of the standard.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.support import agents
from tests.support.agents import other_tasks
from tests.support.web import chat_request, ui_text, user, ws_url
from think_core import Tool, tool
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.server import create_app
from think_core.server.testing import running_server

TIMEOUT = 10.0


make_agent = agents.make_agent.using(store=":memory:")


@asynccontextmanager
async def serve_app(agent: Think, **app_kwargs: Any) -> AsyncIterator[tuple[str, Any]]:
    app = create_app(agent, **app_kwargs)
    async with running_server(app) as base:
        yield base, app


async def recv_past_opening(ws: ClientConnection) -> dict[str, Any]:
    """The next frame that is not a hook-timeline frame nor one of the frames that open the
    connection after the history (the resume state, unasked, and the identity)."""
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        opening = frame.get("type") == "cf_agent_stream_resume_none" and "probeId" not in frame
        if frame.get("type") not in ("think_timeline", "cf_agent_identity") and not opening:
            return frame


async def first_frame_where(ws: ClientConnection, predicate: Any) -> dict[str, Any]:
    while True:
        frame = await recv_past_opening(ws)
        if predicate(frame):
            return frame


async def stream(ws: ClientConnection, stream_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The chunks of ``stream_id`` and its final frame (``done: true``)."""
    chunks = []
    while True:
        frame = await recv_past_opening(ws)
        if frame.get("type") == "cf_agent_use_chat_response" and frame.get("id") == stream_id:
            if frame["done"]:
                return chunks, frame
            chunks.append(json.loads(frame["body"]))


def strict_loads(text: str) -> Any:
    """``JSON.parse`` semantics: NaN / Infinity are not JSON."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


# -- WebSocket: frames that are not what the protocol expects -----------------------------------------


async def test_binary_frames_utf8_json_is_served_and_invalid_utf8_gets_an_error_frame() -> None:
    agent = make_agent(ScriptedModel([Step(text="From bytes."), Step(text="Still here.")]))
    async with serve_app(agent) as (base, _), connect(ws_url(base)) as ws:
        await recv_past_opening(ws)  # snapshot
        await ws.send(json.dumps(chat_request("b1", [user("binary hello", "u1")])).encode("utf-8"))
        chunks, done = await stream(ws, "b1")
        assert ui_text(chunks) == "From bytes." and "error" not in done
        for junk in (b"\xff\xfe\x00garbage", b"\x80", bytes(range(256))):
            await ws.send(junk)
            error = await first_frame_where(ws, lambda f: f["type"] == "cf_agent_error")
            assert error["error"]["type"] == "invalid_frame" and "UTF-8" in error["error"]["message"]
        await ws.send(b"")  # an empty binary frame is not JSON
        error = await first_frame_where(ws, lambda f: f["type"] == "cf_agent_error")
        assert error["error"]["type"] == "invalid_json"
        await ws.send(json.dumps(chat_request("b2", [user("again", "u2")])))
        chunks, _ = await stream(ws, "b2")
        assert ui_text(chunks) == "Still here."
    assert [m.id for m in await agent.session("s1").messages()][::2] == ["u1", "u2"]


NOT_FRAMES = [
    ("42", "invalid_frame"),
    ("-1e999", "invalid_frame"),
    ("null", "invalid_frame"),
    ("true", "invalid_frame"),
    ('"cf_agent_use_chat_request"', "invalid_frame"),
    ("[]", "invalid_frame"),
    ("{}", "invalid_frame"),
    ('{"type": 5}', "invalid_frame"),
    ('{"type": null}', "invalid_frame"),
    ('{"type": ["cf_agent_chat_clear"]}', "invalid_frame"),
    ('{"type": ""}', "unknown_type"),
    ('{"type": "CF_AGENT_CHAT_CLEAR"}', "unknown_type"),
    ('{"type": "cf_agent_mcp_servers", "mcp": {}}', "unknown_type"),
    ('{"type": "cf_agent_use_chat_request", "id": 5, "init": {}}', "invalid_request"),
    ('{"type": "cf_agent_tool_result", "toolCallId": "", "output": 1}', "invalid_request"),
    ('{"type": "cf_agent_tool_result", "toolCallId": "x", "state": "weird"}', "invalid_request"),
    ('{"type": "cf_agent_tool_result", "toolCallId": "x", "autoContinue": "yes"}', "invalid_request"),
    ('{"type": "cf_agent_tool_approval", "toolCallId": "x"}', "invalid_request"),
    ('{"type": "cf_agent_chat_request_cancel", "id": 7}', "invalid_request"),
    ("", "invalid_json"),
    ("{'type': 'single quotes'}", "invalid_json"),
    ('{"type": "cf_agent_chat_clear"', "invalid_json"),
]


async def test_json_values_that_are_not_valid_frames_each_get_an_error_frame_on_one_connection() -> None:
    agent = make_agent(ScriptedModel([Step(text="Survived.")]))
    await agent.session("s1").add_messages([user("keep me", "u0")])
    async with serve_app(agent) as (base, _), connect(ws_url(base)) as ws:
        await recv_past_opening(ws)
        for text, kind in NOT_FRAMES:
            await ws.send(text)
            frame = await recv_past_opening(ws)
            assert frame["type"] == "cf_agent_error", (text, frame)
            assert frame["error"]["type"] == kind and frame["error"]["message"], (text, frame)
        await ws.send(json.dumps(chat_request("ok1", [user("keep me", "u0"), user("still ok?", "u1")])))
        chunks, done = await stream(ws, "ok1")
    assert ui_text(chunks) == "Survived." and "error" not in done
    assert [m.id for m in await agent.session("s1").messages()][:2] == ["u0", "u1"]  # history untouched


@pytest.mark.parametrize("where", ["frame", "init.body"])
async def test_deeply_nested_json_gets_an_error_frame_and_the_connection_survives(where: str) -> None:
    agent = make_agent(ScriptedModel([Step(text="Still here.")]))
    nested = "[" * 100_000  # 100 kB
    text = nested if where == "frame" else json.dumps(
        {"type": "cf_agent_use_chat_request", "id": "deep", "init": {"method": "POST", "body": nested}}
    )
    async with serve_app(agent) as (base, _), connect(ws_url(base)) as ws:
        await recv_past_opening(ws)
        await ws.send(text)
        frame = await recv_past_opening(ws)
        assert frame["type"] in ("cf_agent_error", "cf_agent_use_chat_response") and frame.get("error")
        await ws.send(json.dumps(chat_request("ok", [user("hi", "u1")])))
        chunks, _ = await stream(ws, "ok")
        assert ui_text(chunks) == "Still here."


async def test_enormous_frames_are_refused_and_the_server_keeps_serving() -> None:
    agent = make_agent(ScriptedModel([Step(text="Fine."), Step(text="Fine again.")]))
    async with serve_app(agent, max_body_bytes=4 * 1024 * 1024) as (base, _):
        async with connect(ws_url(base), max_size=None) as ws:
            await recv_past_opening(ws)
            # Above the app's limit (4 MiB here): an error frame, the connection stays.
            await ws.send(json.dumps(chat_request("big", [user("x" * (5 * 1024 * 1024), "u-big")])))
            error = await recv_past_opening(ws)
            assert error["type"] == "cf_agent_error" and error["error"]["type"] == "payload_too_large"
            await ws.send(json.dumps(chat_request("r1", [user("small", "u1")])))
            chunks, _ = await stream(ws, "r1")
            assert ui_text(chunks) == "Fine."
        # Above the WebSocket layer's own limit: that connection is closed (1009), the server lives on.
        async with connect(ws_url(base), max_size=None) as ws:
            while json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))["type"] != "cf_agent_identity":
                pass  # the frames that open the connection end with the identity
            with pytest.raises(ConnectionClosed) as closed:
                await ws.send(b"{" + b" " * (17 * 1024 * 1024) + b"}")
                await asyncio.wait_for(ws.recv(), TIMEOUT)
            assert closed.value.rcvd is None or closed.value.rcvd.code in (1009, 1011, 1006)
        async with connect(ws_url(base)) as ws:
            messages = (await recv_past_opening(ws))["messages"]
            assert [m["id"] for m in messages][0] == "u1" and "u-big" not in [m["id"] for m in messages]
            await ws.send(json.dumps(chat_request("r2", [user("after", "u2")])))
            chunks, _ = await stream(ws, "r2")
            assert ui_text(chunks) == "Fine again."


# -- tool results aimed at another session's calls -----------------------------------------------------


async def test_a_tool_result_for_another_sessions_call_is_refused_and_the_owner_still_settles_it() -> None:
    model = ScriptedModel([Step(tool_calls=[call("pick_color", {}, id="call_owned")]), Step(text="Blue it is.")])
    agent = make_agent(model, tools=[Tool.client("pick_color", "Ask the user for a color.")])
    async with serve_app(agent) as (base, _):
        async with connect(ws_url(base, "owner")) as owner, connect(ws_url(base, "intruder")) as intruder:
            await recv_past_opening(owner)
            await recv_past_opening(intruder)
            await owner.send(json.dumps(chat_request("r1", [user("pick a color", "u1")])))
            await stream(owner, "r1")
            for frame_type, extra in (
                ("cf_agent_tool_result", {"toolName": "pick_color", "output": "red", "autoContinue": True}),
                ("cf_agent_tool_approval", {"approved": True, "autoContinue": True}),
            ):
                await intruder.send(json.dumps({"type": frame_type, "toolCallId": "call_owned", **extra}))
                error = await first_frame_where(intruder, lambda f: f["type"] == "cf_agent_error")
                assert error["error"]["type"] == "not_found" and "call_owned" in error["error"]["message"]
            part = next(p for p in (await agent.session("owner").messages())[-1].parts if p.get("toolCallId") == "call_owned")
            assert part["state"] == "input-available" and "output" not in part and "approval" not in part
            assert await agent.session("intruder").messages() == []
            await owner.send(json.dumps({"type": "cf_agent_tool_result", "toolCallId": "call_owned", "toolName": "pick_color",
                                         "output": "blue", "autoContinue": True}))
            continuation = await first_frame_where(owner, lambda f: f["type"] == "cf_agent_use_chat_response" and f.get("continuation"))
            chunks, _ = await stream(owner, continuation["id"])
    assert ui_text([json.loads(continuation["body"])] + chunks) == "Blue it is."
    assert model.requests[1].messages[-1].output == "blue"


# -- connections that come and go while a turn streams --------------------------------------------------


async def test_rapid_connect_disconnect_during_a_streaming_turn_loses_nothing_and_leaks_no_task(caplog: Any) -> None:
    caplog.set_level(logging.WARNING)
    words = " ".join(f"w{i}" for i in range(120))
    agent = make_agent(ScriptedModel([Step(text=words)], delay=0.005))
    async with serve_app(agent) as (base, app):
        hub = app.state.hub
        async with connect(ws_url(base)) as ws:
            await recv_past_opening(ws)
            await ws.send(json.dumps(chat_request("r1", [user("talk", "u1")])))
            await first_frame_where(ws, lambda f: f["type"] == "cf_agent_use_chat_response" and '"text-delta"' in f["body"])
        # The requesting tab is gone; others flicker in and out while the turn keeps streaming.
        for i in range(12):
            ws = await connect(ws_url(base))
            if i % 3 == 0:
                await recv_past_opening(ws)
            if i % 4 == 1:
                await ws.send('{"type": "cf_agent_stream_resume_request"}')
            await ws.close()
        # One that never reads (its client stops reading the socket once its queue is full, so
        # its own close handshake cannot complete: do not wait long for it).
        half_open = await connect(ws_url(base), close_timeout=0.2)
        session = agent.session("s1")
        deadline = time.monotonic() + TIMEOUT
        while session.active_request_ids or hub.tasks("s1"):
            assert time.monotonic() < deadline, "the turn never finished"
            await asyncio.sleep(0.02)
        await half_open.close()
        stored = await session.messages()
        assert [(m.id, m.role) for m in stored][0] == ("u1", "user") and len(stored) == 2
        assert stored[1].text == words  # finished, not aborted by the disconnects
        async with connect(ws_url(base)) as ws:
            snapshot = await recv_past_opening(ws)
            assert [m["id"] for m in snapshot["messages"]] == [m.id for m in stored]
        await asyncio.sleep(0.05)
        assert hub.connections("s1") == []
    assert other_tasks() == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]


async def test_a_malformed_message_over_websocket_fails_its_own_request_only() -> None:
    agent = make_agent(ScriptedModel([Step(text="Healthy.")] * 3))
    bad = {"id": "a1", "role": "assistant", "parts": [{"type": "tool-get_weather", "state": "output-available", "output": 1}]}
    async with serve_app(agent) as (base, _), connect(ws_url(base)) as ws:
        await recv_past_opening(ws)
        await ws.send(json.dumps(chat_request("bad", [user("q", "u1"), bad, user("q2", "u2")])))
        _, failed = await stream(ws, "bad")
        assert failed.get("error") is True and failed["body"]  # the bad request fails, clearly
        await ws.send(json.dumps(chat_request("good", [user("fresh", "u3")])))
        chunks, done = await stream(ws, "good")
    assert "error" not in done and ui_text(chunks) == "Healthy."
    assert [m.id for m in await agent.session("s1").messages()][0] == "u3"  # nothing of the bad request stored


# -- POST /api/chat with bodies of the wrong shape ------------------------------------------------------


def request_body(messages: Any = None, **extra: Any) -> bytes:
    payload = {"id": "shape", "messages": [user("hi", "u1")] if messages is None else messages, "trigger": "submit-message"}
    payload.update(extra)
    return json.dumps(payload).encode()


WRONG_SHAPES: list[tuple[str, bytes, str]] = [
    ("body-null", b"null", "invalid_request"),
    ("body-number", b"42", "invalid_request"),
    ("body-string", b'"hello"', "invalid_request"),
    ("body-empty", b"", "invalid_json"),
    ("body-not-utf8", b"\xff\xfe{\x00}", "invalid_json"),
    ("body-nan", b'{"id": "shape", "messages": NaN}', "invalid_request"),
    ("id-number", json.dumps({"id": 5, "messages": []}).encode(), "invalid_request"),
    ("id-empty", json.dumps({"id": "", "messages": []}).encode(), "invalid_request"),
    ("id-slash", json.dumps({"id": "a/b", "messages": []}).encode(), "invalid_request"),
    ("id-control", json.dumps({"id": "a\nb", "messages": []}).encode(), "invalid_request"),
    ("id-huge", json.dumps({"id": "x" * 300, "messages": []}).encode(), "invalid_request"),
    ("messages-null", json.dumps({"id": "shape", "messages": None}).encode(), "invalid_request"),
    ("messages-object", request_body(messages={"0": user("hi", "u1")}), "invalid_request"),
    ("message-number", request_body(messages=[1]), "invalid_request"),
    ("message-list", request_body(messages=[[user("hi", "u1")]]), "invalid_request"),
    ("parts-string", request_body(messages=[{"id": "u1", "role": "user", "parts": "hi"}]), "invalid_request"),
    ("part-string", request_body(messages=[{"id": "u1", "role": "user", "parts": ["hi"]}]), "invalid_request"),
    ("message-id-number", request_body(messages=[{"id": 7, "role": "user", "parts": []}]), "invalid_request"),
    ("role-missing", request_body(messages=[{"id": "u1", "parts": []}]), "invalid_request"),
    ("role-tool", request_body(messages=[{"id": "u1", "role": "tool", "parts": []}]), "invalid_request"),
    ("metadata-string", request_body(messages=[{"id": "u1", "role": "user", "parts": [], "metadata": "x"}]), "invalid_request"),
    ("trigger-null", request_body(trigger=None), "invalid_request"),
    ("trigger-number", request_body(trigger=1), "invalid_request"),
    ("messageId-number", request_body(messageId=5), "invalid_request"),
    ("clientTools-string", request_body(clientTools="all"), "invalid_request"),
    ("clientTools-object", request_body(clientTools={"name": "x"}), "invalid_request"),
]


async def test_chat_bodies_of_the_wrong_shape_get_400_json_errors_and_store_nothing() -> None:
    agent = make_agent(ScriptedModel([Step(text="Valid.")]))
    async with serve_app(agent) as (base, _), httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        failures = []
        for name, content, kind in WRONG_SHAPES:
            response = await http.post("/api/chat", content=content, headers={"content-type": "application/json"})
            ok = (
                response.status_code == 400
                and response.headers["content-type"] == "application/json"
                and response.json()["error"]["type"] == kind
                and response.json()["error"]["message"]
            )
            if not ok:
                failures.append((name, response.status_code, response.text[:200]))
        assert failures == []
        assert await agent.session("shape").messages() == []
        # The server and the session are fine afterwards.
        response = await http.post("/api/chat", content=request_body(), headers={"content-type": "application/json"})
        assert response.status_code == 200 and '"delta":"Valid."' in response.text
    assert [m.id for m in await agent.session("shape").messages()][0] == "u1"


async def test_clients_tools_with_junk_entries_are_skipped_not_fatal() -> None:
    seen: list[list[str]] = []

    from think_core import hookimpl

    class Tools:
        @hookimpl
        def before_turn(self, ctx):
            seen.append(sorted(ctx.tools))

    agent = make_agent(ScriptedModel([Step(text="Ok.")]), plugins=[Tools()])
    junk = [1, "x", None, {}, {"name": ""}, {"name": 5}, {"name": "ask_user", "parameters": "not a schema"}]
    async with serve_app(agent) as (base, _), httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        response = await http.post("/api/chat", content=request_body(clientTools=junk), headers={"content-type": "application/json"})
    assert response.status_code == 200 and '"delta":"Ok."' in response.text
    assert seen == [["ask_user"]]


POISONED = [
    ("tool-part-without-toolCallId", [
        user("a", "u1"),
        {"id": "a1", "role": "assistant", "parts": [{"type": "tool-get_weather", "state": "output-available", "output": 1}]},
        user("b", "u2"),
    ]),
    ("text-part-with-a-number", [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": 5}]}]),
    ("part-type-number", [{"id": "a1", "role": "assistant", "parts": [{"type": 5}]}, user("b", "u2")]),
    ("toolCallId-number", [
        {"id": "a1", "role": "assistant", "parts": [{"type": "tool-x", "toolCallId": 5, "state": "output-available"}]},
        user("b", "u2"),
    ]),
]


@pytest.mark.parametrize(("name", "messages"), POISONED, ids=[p[0] for p in POISONED])
async def test_malformed_parts_are_a_400_and_never_poison_the_session(name: str, messages: list[Any]) -> None:
    agent = make_agent(ScriptedModel([Step(text="Healthy.")] * 3))
    async with serve_app(agent) as (base, _), httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        first = await http.post("/api/chat", json={"id": "p", "messages": messages})
        second = await http.post("/api/chat", json={"id": "p", "messages": [user("fresh", "z1")]})
    assert first.status_code == 400 and first.json()["error"]["type"] == "invalid_request"
    assert second.status_code == 200 and '"type":"error"' not in second.text and "Healthy." in second.text


async def test_deeply_nested_json_body_is_a_400() -> None:
    agent = make_agent(ScriptedModel([]))
    async with serve_app(agent) as (base, _), httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        response = await http.post("/api/chat", content=b"[" * 100_000, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_json"


@tool
def measure() -> dict:
    """A measurement that came out undefined."""
    return {"ratio": float("nan"), "limit": float("inf"), "floor": float("-inf"), "ok": 1}


async def test_a_tool_output_with_nan_is_streamed_as_valid_json_over_http_and_websocket() -> None:
    model = ScriptedModel([Step(tool_calls=[call("measure")]), "Measured.", Step(tool_calls=[call("measure")]), "Again."])
    agent = make_agent(model, tools=[measure])
    async with serve_app(agent) as (base, _):
        async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
            response = await http.post("/api/chat", json={"id": "n", "messages": [user("measure", "u1")]})
            events = [e[len("data: "):] for e in response.text.strip().split("\n\n")]
            assert events[-1] == "[DONE]"
            chunks = [strict_loads(e) for e in events[:-1]]
            assert any(c["type"] == "tool-output-available" for c in chunks)
            history = await http.get("/api/sessions/n/messages")
            strict_loads(history.text)
        async with connect(ws_url(base, "n2")) as ws:
            await recv_past_opening(ws)
            await ws.send(json.dumps(chat_request("m1", [user("measure", "u1")])))
            while True:
                raw = await asyncio.wait_for(ws.recv(), TIMEOUT)
                frame = strict_loads(raw)
                if frame.get("type") == "cf_agent_use_chat_response":
                    if frame["body"]:
                        strict_loads(frame["body"])
                if frame.get("type") == "cf_agent_chat_messages" and frame["messages"]:
                    break
