"""The WebSocket frame-ordering guarantees of docs/frame-ordering.md, each with its interleaving
forced: turns are held at an async ``before_turn`` (a gate the test opens), and a frame of an unknown
type serves as a barrier — its error frame is queued after every frame queued before it.

Clients (``useAgentChat``) replace their message list with every ``cf_agent_chat_messages``
wholesale and mark a request ready when their first resume probe is answered, so the order of
frames decides whether a sent message stays on screen and whether a request ends before its
stream.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.support import agents
from tests.support.web import chat_request, ui_text, user, ws_url
from tests.support.ws import until
from think_core import hookimpl, tool
from think_core.errors import ProviderError
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.server import create_app
from think_core.server.hub import SessionHub
from think_core.server.testing import running_server

TIMEOUT = 20.0

make_agent = agents.make_agent.using(store=":memory:")


class Gates:
    """Holds the n-th turn of the agent at ``before_turn`` until the test opens its gate."""

    def __init__(self, *held: int) -> None:
        self.held = set(held)
        self.turns = 0
        self.reached = {n: asyncio.Event() for n in held}
        self.opened = {n: asyncio.Event() for n in held}

    @hookimpl
    async def before_turn(self, ctx: Any) -> None:
        self.turns += 1
        n = self.turns
        if n in self.held:
            self.reached[n].set()
            await self.opened[n].wait()


async def barrier(ws: ClientConnection, name: str) -> list[dict[str, Any]]:
    """The frames the server queued for ``ws`` before it answered a frame of the unknown type
    ``name`` (with an error frame, at once, and nothing else)."""
    await ws.send(json.dumps({"type": name}))
    return (await until(ws, lambda f: f.get("frameType") == name))[:-1]


def is_done(stream_id: str) -> Any:
    return lambda f: f["type"] == "cf_agent_use_chat_response" and f["id"] == stream_id and f["done"]


def snapshots(frames: list[dict[str, Any]]) -> list[list[str]]:
    """The message ids of each transcript snapshot among ``frames``."""
    return [[m["id"] for m in f["messages"]] for f in frames if f["type"] == "cf_agent_chat_messages"]


def last_snapshot(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == "cf_agent_chat_messages"][-1]["messages"]


def first_chunk_index(frames: list[dict[str, Any]], stream_id: str) -> int:
    return next(i for i, f in enumerate(frames) if f["type"] == "cf_agent_use_chat_response" and f["id"] == stream_id)


# -- connecting ---------------------------------------------------------------------------------


async def test_connect_sends_the_history_and_the_resume_state_before_the_identity() -> None:
    """The agents client is ready on the identity: by then it has the history (a message sent
    then is never wiped by it) and its first resume probe is settled (its late answer would
    mark a request sent meanwhile ready before its stream)."""
    agent = make_agent(ScriptedModel([]))
    await agent.session("s1").add_messages([user("earlier", "u0")])
    async with running_server(create_app(agent)) as base, connect(ws_url(base)) as ws:
        frames = await until(ws, lambda f: f["type"] == "cf_agent_identity")
    assert [f["type"] for f in frames] == ["cf_agent_chat_messages", "cf_agent_stream_resume_none", "cf_agent_identity"]
    assert frames[0]["connect"] is True and [m["id"] for m in frames[0]["messages"]] == ["u0"]
    assert "probeId" not in frames[1]


async def test_a_turn_streaming_at_connect_is_announced_before_the_identity_and_replayed_once() -> None:
    gates = Gates(1)
    agent = make_agent(ScriptedModel([Step(text="The whole answer.")]), plugins=[gates])
    async with running_server(create_app(agent)) as base, connect(ws_url(base)) as first:
        await until(first, lambda f: f["type"] == "cf_agent_identity")
        await first.send(json.dumps(chat_request("r1", [user("hello", "u1")])))
        await gates.reached[1].wait()
        # The turn streams (held before its model step) when the second tab connects.
        async with connect(ws_url(base)) as second:
            opening = await until(second, lambda f: f["type"] == "cf_agent_identity")
            assert [f["type"] for f in opening] == ["cf_agent_chat_messages", "cf_agent_stream_resuming", "cf_agent_identity"]
            assert opening[1]["id"] == "r1" and "probeId" not in opening[1]
            # Its probe is answered again (the client ignores that); two acks replay once.
            await second.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p1"}))
            again = (await until(second, lambda f: f.get("probeId") == "p1"))[-1]
            assert again["type"] == "cf_agent_stream_resuming" and again["id"] == "r1"
            await second.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": "r1"}))
            await second.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": "r1"}))
            gates.opened[1].set()
            frames = await until(second, is_done("r1"))
            starts = [f for f in frames if f["type"] == "cf_agent_use_chat_response" and '"type":"start"' in f["body"]]
            assert len(starts) == 1, frames
            assert not [f for f in frames[frames.index(starts[0]) + 1:] if f.get("done")][:-1]


# -- a client's own request ---------------------------------------------------------------------


async def test_the_closing_snapshot_precedes_the_done_frame() -> None:
    agent = make_agent(ScriptedModel([Step(text="Hello.")]))
    async with running_server(create_app(agent)) as base, connect(ws_url(base)) as ws:
        await until(ws, lambda f: f["type"] == "cf_agent_identity")
        await ws.send(json.dumps(chat_request("r1", [user("hi", "u1")])))
        frames = await until(ws, is_done("r1"))
        assert frames[-2]["type"] == "cf_agent_chat_messages", [f["type"] for f in frames[-3:]]
        assert [m["role"] for m in frames[-2]["messages"]] == ["user", "assistant"]
        # Nothing of that turn follows its done frame.
        assert snapshots(await barrier(ws, "p1")) == []


async def test_a_message_sent_right_after_done_is_never_wiped_by_an_older_snapshot() -> None:
    """The client is ready on the done frame and sends at once; the next turn is held before it
    runs: no snapshot lacking the new message reaches the client before its answer streams."""
    gates = Gates(2)
    agent = make_agent(ScriptedModel([Step(text="First."), Step(text="Second.")]), plugins=[gates])
    async with running_server(create_app(agent)) as base, connect(ws_url(base)) as ws:
        await until(ws, lambda f: f["type"] == "cf_agent_identity")
        await ws.send(json.dumps(chat_request("r1", [user("one", "u1")])))
        history = last_snapshot(await until(ws, is_done("r1")))
        await ws.send(json.dumps(chat_request("r2", [*history, user("two", "u2")])))
        await gates.reached[2].wait()
        held = await barrier(ws, "p1")
        gates.opened[2].set()
        rest = await until(ws, is_done("r2"))
        frames = held + rest
        assert all("u2" in ids for ids in snapshots(frames)), snapshots(frames)
        assert snapshots(rest)[-1][2] == "u2"


async def test_a_failed_request_gets_its_error_after_the_snapshot() -> None:
    """A provider error of the client's own turn reaches it as that request's error."""
    agent = make_agent(ScriptedModel([Step(error=ProviderError("model overloaded"))]))
    async with running_server(create_app(agent)) as base, connect(ws_url(base)) as ws:
        await until(ws, lambda f: f["type"] == "cf_agent_identity")
        await ws.send(json.dumps(chat_request("r1", [user("hi", "u1")])))
        frames = await until(ws, is_done("r1"))
        own = [f for f in frames if f["type"] == "cf_agent_use_chat_response" and f["id"] == "r1"]
        errors = [json.loads(f["body"]) for f in own if not f["done"] and '"type":"error"' in f["body"]]
        assert errors and "model overloaded" in errors[0]["errorText"], own
        assert own[-1]["outcome"] == "error" and frames[-2]["type"] == "cf_agent_chat_messages"
        assert snapshots(await barrier(ws, "p1")) == []


# -- other tabs' turns ----------------------------------------------------------------------------


async def test_a_tab_with_a_request_queued_gets_no_snapshot_that_predates_it() -> None:
    """Tab B sends while tab A's turn runs; B's request waits for the turn lock. A's closing
    snapshot (read before B's message was applied) goes to A, not to B."""
    gates = Gates(1, 2)
    agent = make_agent(ScriptedModel([Step(text="For A."), Step(text="For B.")]), plugins=[gates])
    async with running_server(create_app(agent)) as base, connect(ws_url(base)) as a, connect(ws_url(base)) as b:
        await until(a, lambda f: f["type"] == "cf_agent_identity")
        await until(b, lambda f: f["type"] == "cf_agent_identity")
        await a.send(json.dumps(chat_request("ra", [user("from a", "ua")])))
        await gates.reached[1].wait()
        await b.send(json.dumps(chat_request("rb", [user("from a", "ua"), user("from b", "ub")])))
        await barrier(b, "p0")  # B's request is in: in flight from here
        gates.opened[1].set()
        await until(a, is_done("ra"))
        await gates.reached[2].wait()  # B's turn is next, held before it runs
        seen_by_b = await barrier(b, "p1")
        assert all("ub" in ids for ids in snapshots(seen_by_b)), snapshots(seen_by_b)
        gates.opened[2].set()
        rest = await until(b, is_done("rb"))
        assert all("ub" in ids for ids in snapshots(rest)) and snapshots(rest), snapshots(rest)


async def test_a_message_that_crossed_a_snapshot_is_sent_back_before_its_answer() -> None:
    """An idle tab got another tab's snapshot; a message it sent meanwhile may have crossed that
    snapshot on the wire. Once its turn applies the message, it gets the transcript again
    (message included) before the first chunk of the answer."""
    agent = make_agent(ScriptedModel([Step(text="For A."), Step(text="For B.")]))
    async with running_server(create_app(agent)) as base, connect(ws_url(base)) as a, connect(ws_url(base)) as b:
        await until(a, lambda f: f["type"] == "cf_agent_identity")
        await until(b, lambda f: f["type"] == "cf_agent_identity")
        await a.send(json.dumps(chat_request("ra", [user("from a", "ua")])))
        await until(a, is_done("ra"))
        history = last_snapshot(await until(b, is_done("ra")))  # sent to B while it was idle
        await b.send(json.dumps(chat_request("rb", [*history, user("from b", "ub")])))
        frames = await until(b, is_done("rb"))
        start = first_chunk_index(frames, "rb")
        assert any("ub" in ids for ids in snapshots(frames[:start])), [f["type"] for f in frames]


# -- a client tool's answer and its continuation ----------------------------------------------------


async def test_a_tab_waiting_for_a_continuation_gets_the_answered_call_before_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client answers its own tool and probes for the continuation before it streams
    (``stream_pending``). The server's copy of the answered message reaches it before the
    continuation is announced (``stream_resuming``), as the reference server does: a client
    builds the resumed stream on the message it holds when it begins resuming, so an update
    arriving after that would be written over by the stream's next chunk."""
    # The answer waits for the turn ahead of it (hub.wait_idle): held there, the continuation has
    # no stream yet and a probe hears pending — the window a busy machine opens.
    waiting, release = asyncio.Event(), asyncio.Event()
    wait_idle = SessionHub.wait_idle

    async def held_wait_idle(self: SessionHub, session_id: str, **kwargs: Any) -> None:
        if kwargs.get("kind") == "turn" and kwargs.get("timeout", 60.0) is None:
            waiting.set()
            await release.wait()
        await wait_idle(self, session_id, **kwargs)

    monkeypatch.setattr(SessionHub, "wait_idle", held_wait_idle)
    model = ScriptedModel([
        Step(text="Let me ask your browser.", tool_calls=[call("get_location", {}, id="call_loc")]),
        Step(text="You are in Porto."),
    ])
    agent = make_agent(model)
    client_tools = [{"name": "get_location", "description": "Where the user is", "parameters": {"type": "object", "properties": {}}}]
    async with running_server(create_app(agent)) as base, connect(ws_url(base)) as ws:
        await until(ws, lambda f: f["type"] == "cf_agent_identity")
        await ws.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p0"}))
        await until(ws, lambda f: f.get("probeId") == "p0")
        await ws.send(json.dumps(chat_request("r1", [user("where am I?", "u1")], clientTools=client_tools)))
        await until(ws, is_done("r1"))
        await ws.send(json.dumps({
            "type": "cf_agent_tool_result", "toolCallId": "call_loc", "toolName": "get_location",
            "output": {"city": "Porto"}, "autoContinue": True,
        }))
        await waiting.wait()
        await ws.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p1"}))
        assert (await until(ws, lambda f: f.get("probeId") == "p1"))[-1]["type"] == "cf_agent_stream_pending"
        release.set()
        frames = await until(ws, lambda f: f["type"] == "cf_agent_stream_resuming")
        assert frames[-1]["probeId"] == "p1"
        updates = [f["message"] for f in frames if f["type"] == "cf_agent_message_updated"]
        parts = [p for m in updates for p in m["parts"] if p.get("toolCallId") == "call_loc"]
        assert parts and parts[-1]["state"] == "output-available", [f["type"] for f in frames]
        cont = frames[-1]["id"]
        await ws.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": cont}))
        rest = await until(ws, is_done(cont))
        assert not [f for f in rest if f["type"] == "cf_agent_message_updated"], "the update came twice"
        assert "You are in Porto." in json.dumps(last_snapshot(rest)[-1])
    # The resume replays the continued message first (clients rebuild a resumed answer from its
    # stream alone), then the continuation's own chunks from its first: the whole answer.
    replayed = [json.loads(f["body"]) for f in rest if f["type"] == "cf_agent_use_chat_response" and f["id"] == cont and f["body"]]
    kinds = [c["type"] for c in replayed]
    assert kinds[0] == "start" and replayed[0]["messageId"] == replayed[kinds.index("start", 1)]["messageId"], kinds
    assert ui_text(replayed) == "Let me ask your browser.You are in Porto."
    outputs = [c for c in replayed if c["type"] == "tool-output-available"]
    assert [(c["toolCallId"], c["output"]) for c in outputs] == [("call_loc", {"city": "Porto"})]
    prefix = [f for f in rest if f.get("replay") and "seq" not in f and f["body"]]
    assert prefix and all(f["continuation"] for f in prefix) and "finish" not in [json.loads(f["body"])["type"] for f in prefix]


class HoldStep:
    """Holds the n-th model step (counted over the agent's turns) at ``before_step``."""

    def __init__(self, n: int) -> None:
        self.n, self.steps = n, 0
        self.reached, self.opened = asyncio.Event(), asyncio.Event()

    @hookimpl
    async def before_step(self, ctx: Any) -> None:
        self.steps += 1
        if self.steps == self.n:
            self.reached.set()
            await self.opened.wait()


async def test_a_page_reloaded_during_a_continuation_gets_the_whole_answer_over_http() -> None:
    """``GET /api/chat/{id}/stream`` while a client tool's continuation streams: the replay
    starts with the message the continuation continues (``useChat`` rebuilds a resumed answer
    from its stream alone), then the continuation's own stream from its first chunk."""
    hold = HoldStep(3)  # the continuation's second step: its first one is out
    model = ScriptedModel([
        Step(text="Let me ask your browser.", tool_calls=[call("get_location", {}, id="call_loc")]),
        Step(text="Porto: ", tool_calls=[call("get_weather", {"city": "Porto"}, id="call_w")]),
        Step(text="sunny."),
    ])

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    agent = make_agent(model, tools=[get_weather], plugins=[hold])
    client_tools = [{"name": "get_location", "description": "Where the user is", "parameters": {"type": "object", "properties": {}}}]
    async with running_server(create_app(agent)) as base, connect(ws_url(base)) as ws:
        await until(ws, lambda f: f["type"] == "cf_agent_identity")
        await ws.send(json.dumps(chat_request("r1", [user("where am I?", "u1")], clientTools=client_tools)))
        await until(ws, is_done("r1"))
        await ws.send(json.dumps({
            "type": "cf_agent_tool_result", "toolCallId": "call_loc", "toolName": "get_location",
            "output": {"city": "Porto"}, "autoContinue": True,
        }))
        await hold.reached.wait()
        async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http, http.stream("GET", "/api/chat/s1/stream") as resumed:
            assert resumed.status_code == 200
            hold.opened.set()
            events = [ln[6:] async for ln in resumed.aiter_lines() if ln.startswith("data: ")]
        await until(ws, lambda f: f["type"] == "cf_agent_use_chat_response" and f["done"] and f.get("continuation"))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert ui_text(chunks) == "Let me ask your browser.Porto: sunny."
    kinds = [c["type"] for c in chunks]
    assert kinds.count("start") == 2 and kinds.count("finish") == 1, kinds
    assert [c["output"] for c in chunks if c["type"] == "tool-output-available"] == [{"city": "Porto"}, "sunny"]
