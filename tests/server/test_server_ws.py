"""The WebSocket chat endpoint against a real uvicorn server and a real ``websockets`` client.

Frames are checked against Cloudflare's cf_agent_* chat protocol: chunk frames carry one
UI message chunk as a JSON string, a stream ends with ``body: ""`` / ``done: true``, every
connection of the session receives the broadcast, and bad frames get error frames without
costing the connection.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from tests.support import agents
from tests.support.tools import get_weather_in_celsius, send_email
from tests.support.web import chat_request, ui_text, user
from tests.support.ws import client, serve
from think_core import block, hookimpl, tool
from think_core.models.scripted import ScriptedModel, Step, call

TIMEOUT = 10.0


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    raise AssertionError("a blocked tool must never run")


class BodyRecorder:
    """Records what each turn saw, to check how frames map onto TurnContext."""

    def __init__(self) -> None:
        self.turns: list[dict[str, Any]] = []

    @hookimpl
    def before_turn(self, ctx: Any) -> None:
        self.turns.append({"trigger": ctx.trigger, "body": ctx.body, "continuation": ctx.continuation, "tools": sorted(ctx.tools)})


class DeleteGuard:
    @hookimpl
    def before_tool_call(self, ctx: Any) -> Any:
        return block("deleting is not allowed here") if ctx.tool_name == "delete_file" else None


make_agent = agents.make_agent.using(tools=[get_weather_in_celsius, delete_file, send_email], store=":memory:")


def types(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


def collapse(names: list[str]) -> list[str]:
    """Consecutive duplicates folded, so the number of text deltas does not matter."""
    out: list[str] = []
    for name in names:
        if not out or out[-1] != name:
            out.append(name)
    return out


# -- connecting --------------------------------------------------------------------------------


async def test_connect_sends_the_transcript_snapshot() -> None:
    agent = make_agent(ScriptedModel([]))
    await agent.session("s1").add_messages([user("earlier", "u0")])
    async with serve(agent) as base, client(base) as c:
        frame = await c.recv()
        assert frame["type"] == "cf_agent_chat_messages"
        assert [(m["id"], m["role"], m["parts"]) for m in frame["messages"]] == [
            ("u0", "user", [{"type": "text", "text": "earlier"}])
        ]


# -- a tool-calling turn ---------------------------------------------------------------------------


async def test_tool_calling_turn_streams_chunks_then_snapshot_then_done() -> None:
    model = ScriptedModel(
        [
            Step(text="Checking the weather.", tool_calls=[call("get_weather", {"city": "Paris"}, id="call_w")]),
            Step(text="It is sunny in Paris."),
        ]
    )
    recorder = BodyRecorder()
    agent = make_agent(model, plugins=[recorder])
    async with serve(agent) as base, client(base) as c:
        assert (await c.recv())["messages"] == []
        await c.send(chat_request("req1", [user("Weather in Paris?", "u1")], tenant="acme", readonly=False))
        chunks, frames = await c.stream("req1")
        messages = await c.snapshot()

    assert [f["type"] for f in frames[-2:]] == ["cf_agent_chat_messages", "cf_agent_use_chat_response"]
    assert collapse(types(chunks)) == [
        "start", "start-step", "text-start", "text-delta", "text-end",
        "tool-input-start", "tool-input-delta", "tool-input-available", "tool-output-available", "finish-step",
        "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish",
    ]
    assert ui_text(chunks) == "Checking the weather.It is sunny in Paris."
    by_type = {c["type"]: c for c in chunks}
    assert by_type["tool-input-available"] == {
        "type": "tool-input-available", "toolCallId": "call_w", "toolName": "get_weather", "input": {"city": "Paris"}
    }
    assert by_type["tool-output-available"] == {
        "type": "tool-output-available", "toolCallId": "call_w", "output": {"city": "Paris", "sky": "sunny", "celsius": 21}
    }
    # The snapshot is the persisted transcript: the user's message (client id kept) and the reply.
    assert messages[0]["id"] == "u1"
    assert messages[1]["id"] == chunks[0]["messageId"]
    tool_part = next(p for p in messages[1]["parts"] if p["type"] == "tool-get_weather")
    assert tool_part["state"] == "output-available" and tool_part["output"]["sky"] == "sunny"
    # init.body minus messages/trigger became TurnContext.body; the trigger names the entry path.
    assert recorder.turns == [
        {"trigger": "websocket", "body": {"tenant": "acme", "readonly": False}, "continuation": False,
         "tools": ["delete_file", "get_weather", "send_email"]}
    ]


async def test_hook_timeline_reports_each_hook_and_tool_decision() -> None:
    model = ScriptedModel(
        [
            Step(tool_calls=[call("get_weather", {"city": "Oslo"}, id="c_ok"), call("delete_file", {"path": "/x"}, id="c_no")]),
            Step(text="Done."),
        ]
    )
    agent = make_agent(model, plugins=[DeleteGuard()])
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        await c.send(chat_request("req1", [user("go", "u1")]))
        chunks, _ = await c.stream("req1")
    events = [f["event"] for f in c.timeline]
    assert all(f["id"] == "req1" for f in c.timeline)
    hooks = [e["hook"] for e in events]
    assert hooks[:2] == ["before_turn", "before_step"]
    assert hooks[-1] == "on_chat_response" and events[-1]["status"] == "completed"
    assert hooks.count("before_step") == 2 and hooks.count("on_step_finish") == 2
    decisions = {e["toolCallId"]: (e["decision"], e["label"]) for e in events if e["hook"] == "after_tool_call"}
    assert decisions == {"c_ok": ("allow", "allowed"), "c_no": ("block", "blocked")}
    blocked = next(ch for ch in chunks if ch["type"] == "tool-output-available" and ch["toolCallId"] == "c_no")
    assert blocked["output"] == "deleting is not allowed here"
    times = [e["t_ms"] for e in events]
    assert times == sorted(times)


# -- client tools and approvals ----------------------------------------------------------------------


async def test_client_tool_round_trip_with_auto_continuation() -> None:
    model = ScriptedModel(
        [
            Step(text="Let me ask your browser.", tool_calls=[call("get_location", {}, id="call_loc")]),
            Step(text="You are in Berlin."),
        ]
    )
    recorder = BodyRecorder()
    agent = make_agent(model, plugins=[recorder])
    client_tools = [{"name": "get_location", "description": "The user's city.", "parameters": {"type": "object", "properties": {}}}]
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        await c.send(chat_request("req1", [user("Where am I?", "u1")], clientTools=client_tools))
        chunks, _ = await c.stream("req1")
        # The turn ends with the call pending: the client answers it.
        assert collapse(types(chunks)) == [
            "start", "start-step", "text-start", "text-delta", "text-end",
            "tool-input-start", "tool-input-delta", "tool-input-available", "finish-step", "finish",
        ]
        pending = next(ch for ch in chunks if ch["type"] == "tool-input-available")
        assert pending["toolName"] == "get_location" and pending["toolCallId"] == "call_loc"
        first = await c.snapshot()
        part = next(p for p in first[1]["parts"] if p["type"] == "tool-get_location")
        assert part["state"] == "input-available"

        await c.send({
            "type": "cf_agent_tool_result", "toolCallId": "call_loc", "toolName": "get_location",
            "output": {"city": "Berlin"}, "autoContinue": True,
        })
        updated, _ = await c.until(lambda f: f["type"] == "cf_agent_message_updated")
        settled = next(p for p in updated["message"]["parts"] if p["type"] == "tool-get_location")
        assert settled["state"] == "output-available" and settled["output"] == {"city": "Berlin"}

        start, _ = await c.until(lambda f: f["type"] == "cf_agent_use_chat_response")
        assert start["continuation"] is True and start["id"] != "req1"
        rest, frames = await c.stream(start["id"])
        done = frames[-1]
        assert done["done"] is True and done["continuation"] is True
        assert all(f.get("continuation") is True for f in frames if f["type"] == "cf_agent_use_chat_response")
        cont = [json.loads(start["body"])] + rest
        assert ui_text(cont) == "You are in Berlin."
        final = await c.snapshot()

    # The model saw the client's result; the continuation kept the turn's body (client tools).
    tool_messages = [m for m in model.requests[1].messages if m.role == "tool"]
    assert [(m.tool_call_id, m.output) for m in tool_messages] == [("call_loc", {"city": "Berlin"})]
    assert [t["trigger"] for t in recorder.turns] == ["websocket", "auto_continue"]
    assert recorder.turns[1]["continuation"] is True and "get_location" in recorder.turns[1]["tools"]
    # The continuation extends the answer it continues (one message, as chat clients show it):
    # its start names that message, and the stored message holds the call and the new text.
    assert [m["role"] for m in final] == ["user", "assistant"]
    assert json.loads(start["body"]) == {"type": "start", "messageId": first[1]["id"]}
    assert final[1]["id"] == first[1]["id"]
    assert [p["type"] for p in final[1]["parts"] if p["type"] != "text"] == ["step-start", "tool-get_location", "step-start"]
    assert final[1]["parts"][-1] == {"type": "text", "text": "You are in Berlin."}


async def test_client_tool_error_result_without_auto_continue_runs_no_turn() -> None:
    model = ScriptedModel([Step(tool_calls=[call("pick_file", {}, id="call_f")])])
    agent = make_agent(model)
    client_tools = [{"name": "pick_file", "description": "Pick a file.", "parameters": {"type": "object", "properties": {}}}]
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        await c.send(chat_request("req1", [user("pick", "u1")], clientTools=client_tools))
        await c.stream("req1")
        await c.snapshot()
        await c.send({"type": "cf_agent_tool_result", "toolCallId": "call_f", "toolName": "pick_file",
                      "output": None, "state": "output-error", "errorText": "user closed the dialog"})
        messages, frames = await c.until(lambda f: f["type"] == "cf_agent_chat_messages")
    assert not [f for f in frames if f["type"] == "cf_agent_use_chat_response"]
    part = next(p for p in messages["messages"][1]["parts"] if p["type"] == "tool-pick_file")
    assert part["state"] == "output-error" and part["errorText"] == "user closed the dialog"
    assert len(model.requests) == 1


async def test_tool_approval_runs_the_tool_in_the_continuation() -> None:
    model = ScriptedModel(
        [Step(tool_calls=[call("send_email", {"to": "ada@example.com"}, id="call_m")]), Step(text="Email sent.")]
    )
    agent = make_agent(model)
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        await c.send(chat_request("req1", [user("mail ada", "u1")]))
        chunks, _ = await c.stream("req1")
        assert {"type": "tool-approval-request", "approvalId": "call_m", "toolCallId": "call_m"} in chunks
        await c.snapshot()
        await c.send({"type": "cf_agent_tool_approval", "toolCallId": "call_m", "approved": True, "autoContinue": True})
        start, _ = await c.until(lambda f: f["type"] == "cf_agent_use_chat_response")
        rest, _ = await c.stream(start["id"])
        cont = [json.loads(start["body"])] + rest
        final = await c.snapshot()
    assert {"type": "tool-output-available", "toolCallId": "call_m", "output": "sent to ada@example.com"} in cont
    assert ui_text(cont) == "Email sent."
    part = next(p for p in final[1]["parts"] if p["type"] == "tool-send_email")
    assert part["state"] == "output-available" and part["approval"]["approved"] is True


# -- broadcast -------------------------------------------------------------------------------------


async def test_second_connection_of_the_session_receives_the_broadcast() -> None:
    model = ScriptedModel([Step(text="Hello to both tabs.")])
    agent = make_agent(model)
    async with serve(agent) as base, client(base) as a, client(base) as b, client(base, "other") as other:
        for c in (a, b, other):
            await c.recv()
        await a.send(chat_request("req1", [user("hi", "u1")]))
        a_chunks, _ = await a.stream("req1")
        b_chunks, b_frames = await b.stream("req1")
        a_snapshot = await a.snapshot()
        b_snapshot = await b.snapshot()
        # The other session saw nothing: its next frame is the answer to this garbage frame.
        await other.send("garbage")
        assert (await other.recv())["type"] == "cf_agent_error"
    assert b_chunks == a_chunks
    assert ui_text(b_chunks) == "Hello to both tabs."
    # The second tab learnt of the user's message when the turn was admitted.
    announced = [f for f in b_frames if f["type"] == "cf_agent_message_updated"]
    assert [f["message"]["id"] for f in announced] == ["u1"]
    assert a_snapshot == b_snapshot and [m["role"] for m in b_snapshot] == ["user", "assistant"]


async def test_clear_empties_the_history_and_is_broadcast() -> None:
    agent = make_agent(ScriptedModel([Step(text="Something.")]))
    async with serve(agent) as base, client(base) as a, client(base) as b:
        await a.recv(), await b.recv()
        await a.send(chat_request("req1", [user("hi", "u1")]))
        await a.stream("req1")
        await a.snapshot()
        await a.send({"type": "cf_agent_chat_clear"})
        await a.until(lambda f: f["type"] == "cf_agent_chat_clear")
        await b.until(lambda f: f["type"] == "cf_agent_chat_clear")
    assert await agent.session("s1").messages() == []


# -- cancellation ------------------------------------------------------------------------------------


async def test_cancel_aborts_the_stream_and_persists_the_partial_reply() -> None:
    long_text = " ".join(f"word{i}" for i in range(400))
    agent = make_agent(ScriptedModel([Step(text=long_text)], delay=0.02))
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        await c.send(chat_request("req1", [user("talk a lot", "u1")]))
        deltas = 0
        while deltas < 3:
            frame = await c.recv()
            if frame["type"] == "cf_agent_use_chat_response" and json.loads(frame["body"])["type"] == "text-delta":
                deltas += 1
        await c.send({"type": "cf_agent_chat_request_cancel", "id": "req1"})
        chunks, _ = await c.stream("req1")
        messages = await c.snapshot()
    assert types(chunks)[-1] == "abort"
    assert "finish" not in types(chunks)
    partial = messages[1]
    assert partial["role"] == "assistant"
    text = "".join(p.get("text", "") for p in partial["parts"] if p["type"] == "text")
    assert text and long_text.startswith(text) and len(text) < len(long_text)
    stored = await agent.session("s1").messages()
    assert stored[1].text == text


# -- malformed frames ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        ("this is not json", "invalid_json"),
        ("[1, 2, 3]", "invalid_frame"),
        ('{"no_type": true}', "invalid_frame"),
        ('{"type": "cf_agent_does_not_exist"}', "unknown_type"),
        ('{"type": "cf_agent_tool_result", "output": 1}', "invalid_request"),
        ('{"type": "cf_agent_tool_approval", "toolCallId": "x", "approved": "yes"}', "invalid_request"),
        ('{"type": "cf_agent_chat_request_cancel"}', "invalid_request"),
        ('{"type": "cf_agent_use_chat_request", "init": {"method": "POST", "body": "{}"}}', "invalid_request"),
    ],
)
async def test_malformed_frames_get_error_frames_and_the_connection_still_works(frame: str, kind: str) -> None:
    agent = make_agent(ScriptedModel([Step(text="Still here.")]))
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        await c.send(frame)
        error = await c.recv()
        assert error["type"] == "cf_agent_error"
        assert error["error"]["type"] == kind and error["error"]["message"]
        await c.send(chat_request("req1", [user("ok?", "u1")]))
        chunks, _ = await c.stream("req1")
    assert ui_text(chunks) == "Still here."


@pytest.mark.parametrize(
    "init",
    [
        {"method": "POST", "body": "{not json"},
        {"method": "POST", "body": json.dumps({"messages": "hello"})},
        {"method": "POST", "body": json.dumps({"messages": [], "trigger": "explode"})},
        {"method": "POST", "body": json.dumps({"messages": [{"role": "wizard", "parts": []}]})},
        {"method": "GET", "body": json.dumps({"messages": []})},
        {"method": "POST"},
    ],
)
async def test_bad_chat_requests_fail_their_own_stream(init: dict[str, Any]) -> None:
    agent = make_agent(ScriptedModel([Step(text="Fine.")]))
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        await c.send({"type": "cf_agent_use_chat_request", "id": "bad1", "init": init})
        failed = await c.recv()
        assert failed["type"] == "cf_agent_use_chat_response" and failed["id"] == "bad1"
        assert failed["done"] is True and failed["error"] is True and failed["body"]
        await c.send(chat_request("req2", [user("again", "u1")]))
        chunks, _ = await c.stream("req2")
    assert ui_text(chunks) == "Fine."
    assert len(await agent.session("s1").messages()) == 2


async def test_oversized_frame_is_refused_with_an_error_frame() -> None:
    agent = make_agent(ScriptedModel([Step(text="Small is fine.")]))
    async with serve(agent, max_body_bytes=2000) as base, client(base) as c:
        await c.recv()
        await c.send(chat_request("big", [user("x" * 5000, "u1")]))
        error = await c.recv()
        assert error["type"] == "cf_agent_error" and error["error"]["type"] == "payload_too_large"
        await c.send(chat_request("req2", [user("small", "u2")]))
        chunks, _ = await c.stream("req2")
    assert ui_text(chunks) == "Small is fine."
    stored = await agent.session("s1").messages()
    assert [(m.id, m.role) for m in stored] == [("u2", "user"), (chunks[0]["messageId"], "assistant")]


async def test_tool_result_for_an_unknown_call_is_an_error_frame() -> None:
    agent = make_agent(ScriptedModel([]))
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        await c.send({"type": "cf_agent_tool_result", "toolCallId": "nope", "toolName": "x", "output": 1})
        error = await c.recv()
    assert error["type"] == "cf_agent_error" and error["error"]["type"] == "not_found"
    assert "nope" in error["error"]["message"]


# -- regenerate -------------------------------------------------------------------------------------------


async def test_regenerate_replaces_the_last_reply() -> None:
    agent = make_agent(ScriptedModel([Step(text="First answer."), Step(text="Second answer.")]))
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        await c.send(chat_request("req1", [user("q", "u1")]))
        first, _ = await c.stream("req1")
        await c.snapshot()
        request = chat_request("req2", [user("q", "u1")])
        body = json.loads(request["init"]["body"])
        body.update(trigger="regenerate-message", messageId=first[0]["messageId"])
        request["init"]["body"] = json.dumps(body)
        await c.send(request)
        second, _ = await c.stream("req2")
        messages = await c.snapshot()
    assert ui_text(second) == "Second answer."
    assert [m["id"] for m in messages] == ["u1", second[0]["messageId"]]
    assert messages[1]["parts"][-1]["text"] == "Second answer."


# -- auth --------------------------------------------------------------------------------------------------


async def test_token_is_required_when_configured() -> None:
    agent = make_agent(ScriptedModel([]))
    async with serve(agent, api_token="s3cret") as base:
        with pytest.raises(InvalidStatus) as refused:
            async with client(base):
                pass
        assert refused.value.response.status_code == 403
        with pytest.raises(InvalidStatus):
            async with client(base, query="?token=wrong"):
                pass
        async with client(base, query="?token=s3cret") as c:
            assert (await c.recv())["type"] == "cf_agent_chat_messages"
        async with client(base, additional_headers={"Authorization": "Bearer s3cret"}) as c:
            assert (await c.recv())["type"] == "cf_agent_chat_messages"


async def test_resume_request_is_answered_with_resume_none() -> None:
    agent = make_agent(ScriptedModel([]))
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        await c.send({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
        reply = await c.recv()
    assert reply == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p1"}


class BrokenSetup:
    @hookimpl
    def configure_session(self, session: Any) -> None:
        raise RuntimeError("tenant store unavailable")


async def test_a_session_that_cannot_open_gets_an_error_frame_and_a_close() -> None:
    from websockets.exceptions import ConnectionClosed

    agent = make_agent(ScriptedModel([]), plugins=[BrokenSetup()])
    async with serve(agent) as base, client(base) as c:
        error = await c.recv()
        with pytest.raises(ConnectionClosed) as closed:
            await c.recv()
    assert error["type"] == "cf_agent_error" and error["error"]["type"] == "internal_error"
    assert "tenant store unavailable" in error["error"]["message"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011


async def test_too_many_requests_in_flight_are_refused_on_their_own_stream() -> None:
    from think_core.server import ws as ws_module

    model = ScriptedModel([Step(text=" ".join(["slow"] * 40))], delay=0.02, repeat=True)
    agent = make_agent(model)
    limit = ws_module.MAX_REQUESTS_IN_FLIGHT
    async with serve(agent) as base, client(base) as c:
        await c.recv()
        for i in range(limit + 1):
            await c.send(chat_request(f"r{i}", [user(f"q{i}", f"u{i}")]))
        refused, _ = await c.until(
            lambda f: f.get("type") == "cf_agent_use_chat_response" and f.get("id") == f"r{limit}" and f.get("done")
        )
        assert refused.get("error") is True and "too many chat requests" in refused["body"]
        for i in range(limit):
            await c.send({"type": "cf_agent_chat_request_cancel", "id": f"r{i}"})


async def test_a_client_too_far_behind_is_disconnected_not_silently_starved(monkeypatch) -> None:
    """The outbox policy, with a peer that accepts no more bytes (a send that never returns)."""
    from think_core.server import hub as hub_module

    class NeverReads:
        def __init__(self) -> None:
            self.sent: list[str] = []
            self.closed_with: list[int] = []

        async def send_text(self, text: str) -> None:
            self.sent.append(text)
            await asyncio.Event().wait()  # the peer's buffers are full: this send never completes

        async def close(self, code: int = 1000) -> None:
            self.closed_with.append(code)

    monkeypatch.setattr(hub_module, "MAX_OUTBOX", 3)
    peer = NeverReads()
    connection = hub_module.Connection("s1", peer)  # type: ignore[arg-type]
    for i in range(10):
        connection.send({"type": "frame", "n": i})
        await asyncio.sleep(0)
    await connection.close()
    assert peer.closed_with == [1013]  # told to come back later, not left silently starved
    assert connection.closed and len(peer.sent) == 1
