"""``POST /api/chat`` and the JSON endpoints, against a real uvicorn server and httpx.

The stream is checked event by event against the AI SDK UI message stream protocol: the
response headers, ``data: <json>\\n\\n`` framing, the closing ``data: [DONE]``, the exact chunk
sequence, and every chunk's fields against the protocol's strict chunk shapes (an unknown or
missing field would make ``useChat`` reject the chunk).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support import agents
from tests.support.http_chat import api, parse_sse, post_chat, transport_body
from tests.support.tools import get_weather
from tests.support.web import ui_text, user
from think_core import hookimpl
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.server import create_app
from think_core.server.testing import running_server, wait_until_healthy


class BodyRecorder:
    def __init__(self) -> None:
        self.turns: list[tuple[str, Any, bool]] = []

    @hookimpl
    def before_turn(self, ctx: Any) -> None:
        self.turns.append((ctx.trigger, ctx.body, ctx.continuation))


make_agent = agents.make_agent.using(tools=[get_weather], store=":memory:")


# -- the stream -----------------------------------------------------------------------------------


async def test_chat_answers_with_the_ui_message_stream_chunk_by_chunk() -> None:
    model = ScriptedModel(
        [
            Step(text="Checking now.", tool_calls=[call("get_weather", {"city": "Paris"}, id="call_w")]),
            Step(text="Sunny in Paris."),
        ]
    )
    recorder = BodyRecorder()
    agent = make_agent(model, plugins=[recorder])
    async with api(agent) as http:
        _, chunks = await post_chat(http, transport_body("chat1", [user("Weather?", "u1")], tenant="acme"))
        history = (await http.get("/api/sessions/chat1/messages")).json()

    message_id = chunks[0]["messageId"]
    assert chunks == [
        {"type": "start", "messageId": message_id},
        {"type": "start-step"},
        {"type": "text-start", "id": "t1"},
        {"type": "text-delta", "id": "t1", "delta": "Checking "},
        {"type": "text-delta", "id": "t1", "delta": "now."},
        {"type": "text-end", "id": "t1"},
        {"type": "tool-input-start", "toolCallId": "call_w", "toolName": "get_weather"},
        {"type": "tool-input-delta", "toolCallId": "call_w", "inputTextDelta": '{"city": "Paris"}'},
        {"type": "tool-input-available", "toolCallId": "call_w", "toolName": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool-output-available", "toolCallId": "call_w", "output": {"city": "Paris", "sky": "sunny"}},
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "text-start", "id": "t2"},
        {"type": "text-delta", "id": "t2", "delta": "Sunny "},
        {"type": "text-delta", "id": "t2", "delta": "in "},
        {"type": "text-delta", "id": "t2", "delta": "Paris."},
        {"type": "text-end", "id": "t2"},
        {"type": "finish-step"},
        {"type": "finish"},
    ]
    # The request's id is the session; extra fields are the turn's body.
    assert recorder.turns == [("http", {"tenant": "acme"}, False)]
    assert history["id"] == "chat1"
    assert [(m["id"], m["role"]) for m in history["messages"]] == [("u1", "user"), (message_id, "assistant")]


async def test_only_new_messages_are_appended_when_the_client_resends_the_transcript() -> None:
    agent = make_agent(ScriptedModel([Step(text="One."), Step(text="Two.")]))
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("c", [user("first", "u1")]))
        reply = {"id": first[0]["messageId"], "role": "assistant", "parts": [{"type": "text", "text": "One."}]}
        _, second = await post_chat(http, transport_body("c", [user("first", "u1"), reply, user("second", "u2")]))
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
    assert ui_text(second) == "Two."
    assert [m["id"] for m in history] == ["u1", first[0]["messageId"], "u2", second[0]["messageId"]]


async def test_a_failing_model_ends_the_stream_with_an_error_chunk_and_done() -> None:
    agent = make_agent(ScriptedModel([Step(error=RuntimeError("the model fell over"))]))
    async with api(agent) as http:
        _, chunks = await post_chat(http, transport_body("c", [user("hi", "u1")]))
    # Failed before any output: the error alone. No `start` announces a message the server never
    # stores (the AI SDK client would keep it, and the two transcripts would disagree).
    assert chunks == [{"type": "error", "errorText": "the model fell over"}]


async def test_client_tool_result_resent_in_the_transcript_runs_the_continuation() -> None:
    model = ScriptedModel([Step(tool_calls=[call("get_location", {}, id="call_loc")]), Step(text="You are in Rome.")])
    recorder = BodyRecorder()
    agent = make_agent(model, plugins=[recorder])
    client_tools = [{"name": "get_location", "description": "The user's city.", "parameters": {"type": "object", "properties": {}}}]
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("c", [user("where?", "u1")], clientTools=client_tools))
        assert first[-3:] == [
            {"type": "tool-input-available", "toolCallId": "call_loc", "toolName": "get_location", "input": {}},
            {"type": "finish-step"},
            {"type": "finish"},
        ]
        # useChat's addToolResult settles the part locally, then resubmits the transcript.
        assistant = {
            "id": first[0]["messageId"],
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {"type": "tool-get_location", "toolCallId": "call_loc", "state": "output-available", "input": {}, "output": {"city": "Rome"}},
            ],
        }
        _, cont = await post_chat(http, transport_body("c", [user("where?", "u1"), assistant], clientTools=client_tools))
    assert ui_text(cont) == "You are in Rome."
    assert [(t[0], t[2]) for t in recorder.turns] == [("http", False), ("auto_continue", True)]
    tool_messages = [m for m in model.requests[1].messages if m.role == "tool"]
    assert [(m.tool_call_id, m.output) for m in tool_messages] == [("call_loc", {"city": "Rome"})]


async def test_regenerate_replaces_the_last_assistant_message() -> None:
    agent = make_agent(ScriptedModel([Step(text="Draft."), Step(text="Better.")]))
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("c", [user("q", "u1")]))
        body = {"id": "c", "messages": [user("q", "u1")], "trigger": "regenerate-message", "messageId": first[0]["messageId"]}
        _, second = await post_chat(http, body)
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
    assert ui_text(second) == "Better."
    assert [m["id"] for m in history] == ["u1", second[0]["messageId"]]


LONG_TEXT = " ".join(f"w{i}" for i in range(150))


async def read_deltas(http: httpx.AsyncClient, body: dict[str, Any], n: int) -> None:
    """POST a chat and close the response after ``n`` text deltas (a reload, a closed tab)."""
    async with http.stream("POST", "/api/chat", json=body) as response:
        deltas = 0
        async for line in response.aiter_lines():
            if line.startswith("data: ") and '"text-delta"' in line:
                deltas += 1
                if deltas == n:
                    break


async def settled_history(agent: Think, session_id: str) -> list[Any]:
    session = agent.session(session_id)
    for _ in range(1500):  # 30 s
        messages = await session.messages()
        unfinished = await session.list_submissions(status="running") + await session.list_submissions(status="pending")
        if len(messages) == 2 and not unfinished and not session.active_request_ids:
            return messages
        await asyncio.sleep(0.02)
    raise AssertionError(f"the turn of {session_id} did not end: {await session.messages()}")


async def test_a_closed_response_is_not_a_stop_the_turn_runs_on_and_a_reload_resumes_it() -> None:
    agent = make_agent(ScriptedModel([Step(text=LONG_TEXT)], delay=0.01))
    async with api(agent) as http:
        await read_deltas(http, transport_body("c", [user("go", "u1")]), 3)
        # The reloaded page (useChat({resume: true})) gets the running answer from its start.
        async with http.stream("GET", "/api/chat/c/stream") as resumed:
            assert resumed.status_code == 200
            raw = "".join([line + "\n" async for line in resumed.aiter_lines()])
        chunks = parse_sse(raw)
        messages = await settled_history(agent, "c")
        # Sending the same message again (a retry after the reload) replays it: no second answer.
        _, again = await post_chat(http, transport_body("c", [user("go", "u1")]))
        assert len(await agent.session("c").messages()) == 2
    assert chunks[0]["type"] == "start" and ui_text(chunks) == LONG_TEXT
    assert messages[1].text == LONG_TEXT and ui_text(again) == LONG_TEXT
    assert not (messages[1].metadata or {}).get("stopped")
    [row] = await agent.session("c").list_submissions()
    assert row.status == "completed"


async def test_the_stop_route_stops_the_turn_and_keeps_the_partial_answer_marked_stopped() -> None:
    agent = make_agent(ScriptedModel([Step(text=LONG_TEXT)], delay=0.02))
    async with api(agent) as http:
        assert (await http.post("/api/chat/c/stop")).json() == {"id": "c", "stopped": []}  # nothing runs
        body = transport_body("c", [user("go", "u1")])
        async with http.stream("POST", "/api/chat", json=body) as response:
            deltas, lines = 0, []
            async for line in response.aiter_lines():
                lines.append(line)
                if line.startswith("data: ") and '"text-delta"' in line:
                    deltas += 1
                    if deltas == 3:
                        stopped = (await http.post("/api/chat/c/stop")).json()["stopped"]
        messages = await settled_history(agent, "c")
    assert len(stopped) == 1
    events = [line for line in lines if line.startswith("data: ")]
    assert events[-2:] == ['data: {"type":"abort"}', "data: [DONE]"], events[-3:]  # the stopped stream ends
    partial = messages[1].text
    assert partial and LONG_TEXT.startswith(partial) and len(partial) < len(LONG_TEXT)
    assert messages[1].metadata == {"stopped": True}
    [row] = await agent.session("c").list_submissions()
    assert (row.submission_id, row.status) == (stopped[0], "aborted")


async def test_cancel_on_disconnect_stops_the_turn_when_its_response_is_closed() -> None:
    agent = make_agent(ScriptedModel([Step(text=LONG_TEXT)], delay=0.02))
    async with api(agent, cancel_on_disconnect=True) as http:
        await read_deltas(http, transport_body("c", [user("go", "u1")]), 3)
        messages = await settled_history(agent, "c")
    partial = messages[1].text
    assert partial and LONG_TEXT.startswith(partial) and len(partial) < len(LONG_TEXT)
    assert (messages[1].metadata or {}).get("stopped") is True


# -- request errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "status", "kind"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_request"),
        (json.dumps({"messages": []}).encode(), 400, "invalid_request"),
        (json.dumps({"id": "c", "messages": "hi"}).encode(), 400, "invalid_request"),
        (json.dumps({"id": "c", "messages": [], "trigger": "nope"}).encode(), 400, "invalid_request"),
        (json.dumps({"id": "c", "messages": [{"role": "robot", "parts": []}]}).encode(), 400, "invalid_request"),
    ],
)
async def test_bad_chat_requests_get_json_errors(content: bytes, status: int, kind: str) -> None:
    agent = make_agent(ScriptedModel([]))
    async with api(agent) as http:
        response = await http.post("/api/chat", content=content, headers={"content-type": "application/json"})
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == kind and isinstance(error["message"], str) and error["message"]


async def test_oversized_bodies_get_413_with_or_without_content_length() -> None:
    agent = make_agent(ScriptedModel([]))
    big = json.dumps(transport_body("c", [user("x" * 5000, "u1")])).encode()

    async def chunked() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 1000):
            yield big[i:i + 1000]

    async with api(agent, max_body_bytes=2000) as http:
        declared = await http.post("/api/chat", content=big, headers={"content-type": "application/json"})
        streamed = await http.post("/api/chat", content=chunked(), headers={"content-type": "application/json"})
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["error"]["type"] == "payload_too_large"
    assert "content-length" not in streamed.request.headers
    assert await agent.session("c").messages() == []


async def test_unknown_routes_and_methods_are_json_errors() -> None:
    agent = make_agent(ScriptedModel([]))
    async with api(agent) as http:
        missing = await http.get("/api/nothing-here")
        wrong_method = await http.get("/api/chat")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["type"] == "method_not_allowed"


# -- auth and the other endpoints -----------------------------------------------------------------------


async def test_bearer_token_guards_the_api_but_not_healthz() -> None:
    agent = make_agent(ScriptedModel([Step(text="Authorized.")]))
    async with api(agent, api_token="s3cret") as http:
        health = await http.get("/healthz")
        anonymous = await http.post("/api/chat", json=transport_body("c", [user("hi", "u1")]))
        wrong = await http.get("/api/sessions/c/messages", headers={"Authorization": "Bearer nope"})
        query_only = await http.get("/api/sessions/c/messages?token=s3cret")
        response = await http.post(
            "/api/chat", json=transport_body("c", [user("hi", "u1")]), headers={"Authorization": "Bearer s3cret"}
        )
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    for refused in (anonymous, wrong, query_only):
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "unauthorized"
    assert response.status_code == 200
    assert ui_text(parse_sse(response.text)) == "Authorized."


async def test_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THINK_API_TOKEN", "from-env")
    agent = make_agent(ScriptedModel([]))
    async with api(agent) as http:
        refused = await http.get("/api/sessions/c/messages")
        allowed = await http.get("/api/sessions/c/messages", headers={"Authorization": "Bearer from-env"})
    assert refused.status_code == 401 and allowed.status_code == 200


async def test_submissions_endpoint_lists_durable_submissions() -> None:
    agent = make_agent(ScriptedModel([Step(text="Done durably.")]))
    async with api(agent) as http:
        session = agent.session("c")
        accepted = await session.submit_messages([user("later", "u1")], idempotency_key="k1")
        await session.wait_for_submission(accepted.submission_id, timeout=10)
        listed = (await http.get("/api/sessions/c/submissions")).json()
        filtered = (await http.get("/api/sessions/c/submissions?status=pending")).json()
        bad_limit = await http.get("/api/sessions/c/submissions?limit=zero")
        await session.aclose()
    assert listed["id"] == "c"
    [row] = listed["submissions"]
    assert row["idempotency_key"] == "k1" and row["status"] == "completed"
    assert row["submission_id"] == accepted.submission_id
    assert filtered["submissions"] == []
    assert bad_limit.status_code == 400 and bad_limit.json()["error"]["type"] == "invalid_request"


async def test_invalid_session_id_is_rejected() -> None:
    agent = make_agent(ScriptedModel([]))
    async with api(agent) as http:
        response = await http.post("/api/chat", json=transport_body("x" * 300, [user("hi", "u1")]))
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request"


# -- think serve ---------------------------------------------------------------------------------------------


async def test_think_serve_runs_the_app_and_stops_cleanly_on_sigint(tmp_path: Any) -> None:
    import signal
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "think_core.cli", "serve", "--model", "demo", "--db", str(tmp_path / "chats.db"), "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        assert line.startswith("think: serving on http://127.0.0.1:"), line
        base = line.split()[3]
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
            await wait_until_healthy(http)
            page = await http.get("/")
            _, chunks = await post_chat(http, transport_body("cli", [user("weather in oslo", "u1")]))
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert page.status_code == 200 and "<title>think" in page.text
    assert "Oslo: -3°C and snowing" in ui_text(chunks)
    assert proc.returncode == 0, err.decode()
    assert (tmp_path / "chats.db").exists()


async def test_websocket_clients_of_the_session_see_http_turns() -> None:
    from websockets.asyncio.client import connect

    agent = make_agent(ScriptedModel([Step(text="Seen by the page too.")]))
    async with running_server(create_app(agent)) as base:
        async with connect(base.replace("http://", "ws://") + "/agents/think/c") as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "cf_agent_chat_messages"
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "cf_agent_stream_resume_none"
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "cf_agent_identity"
            async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
                _, chunks = await post_chat(http, transport_body("c", [user("hi", "u1")]))
            mirrored: list[dict[str, Any]] = []
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if frame["type"] == "cf_agent_chat_messages":
                    break
                if frame["type"] == "cf_agent_use_chat_response" and not frame["done"]:
                    mirrored.append(json.loads(frame["body"]))
    assert mirrored == chunks
    assert [m["id"] for m in frame["messages"]] == ["u1", chunks[0]["messageId"]]


class BrokenSetup:
    @hookimpl
    def configure_session(self, session: Any) -> None:
        raise RuntimeError("no database for this tenant")


async def test_a_session_that_cannot_open_is_a_500_json_error() -> None:
    agent = make_agent(ScriptedModel([]), plugins=[BrokenSetup()])
    async with api(agent) as http:
        response = await http.post("/api/chat", json=transport_body("c", [user("hi", "u1")]))
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "internal_error" and "no database for this tenant" in error["message"]


async def test_an_edited_user_message_replaces_it_and_what_followed() -> None:
    model = ScriptedModel([Step(text="Four."), Step(text="Quatre.")])
    agent = make_agent(model)
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("c", [user("2+2?", "u1")]))
        # useChat's sendMessage({text, messageId: "u1"}) replaces u1 and drops what came after.
        edited = {"id": "c", "messages": [user("2+2, in French?", "u1")], "trigger": "submit-message", "messageId": "u1"}
        _, second = await post_chat(http, edited)
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
    assert ui_text(second) == "Quatre."
    assert [(m["role"], m["parts"][-1].get("text")) for m in history] == [
        ("user", "2+2, in French?"), ("assistant", "Quatre."),
    ]
    assert [m.content for m in model.requests[1].messages] == ["2+2, in French?"]


async def test_a_tool_result_and_a_new_message_in_one_request_lose_nothing() -> None:
    model = ScriptedModel([Step(tool_calls=[call("get_location", {}, id="call_loc")]), Step(text="Rome; noted.")])
    agent = make_agent(model)
    client_tools = [{"name": "get_location", "parameters": {"type": "object", "properties": {}}}]
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("c", [user("where?", "u1")], clientTools=client_tools))
        assistant = {
            "id": first[0]["messageId"],
            "role": "assistant",
            "parts": [{"type": "tool-get_location", "toolCallId": "call_loc", "state": "output-available",
                       "input": {}, "output": {"city": "Rome"}}],
        }
        _, second = await post_chat(
            http, transport_body("c", [user("where?", "u1"), assistant, user("also, hi", "u2")], clientTools=client_tools)
        )
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
    assert ui_text(second) == "Rome; noted."
    assert [m["id"] for m in history][:3] == ["u1", first[0]["messageId"], "u2"]
    sent = model.requests[1].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[2].output == {"city": "Rome"} and sent[3].content == "also, hi"
