"""Both transports apply a client's transcript through one path, under the session's turn lock.

The same conversation — a tool-calling answer, an edit of the first message and a regeneration,
each sent while another turn of the session is still streaming — is played over ``POST
/api/chat`` and over the WebSocket (and with the turn in flight on the other transport). The
history must end the same every time, and well formed: the in-flight turn's messages are cut
with the rest (they were written before the edit was applied, never after it), every tool call
has its result, each user message is followed by its answer.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, Protocol

import httpx
from websockets.asyncio.client import ClientConnection, connect

from tests.support.tools import get_weather
from tests.support.web import user
from think_core.agent import Think
from think_core.chat.transcript import ClientTranscript, ToolAnswer, reconcile
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.server import create_app
from think_core.server.testing import running_server
from think_core.types import UIMessage

TIMEOUT = 20.0
SLOW = " ".join(f"w{i}" for i in range(25))  # the answer streaming while the next request arrives
TRANSPORTS = ("http", "ws")


def weather_script() -> ScriptedModel:
    return ScriptedModel(
        [
            Step(text="Let me look.", tool_calls=[call("get_weather", {"city": "Paris"}, id="call_paris")]),
            Step(text="Sunny in Paris."),
            Step(text=SLOW),  # in flight during the edit
            Step(text="Il fait beau."),  # the edited message's answer
            Step(text=SLOW),  # in flight during the regeneration
            Step(tool_calls=[call("get_weather", {"city": "Lyon"}, id="call_lyon")]),
            Step(text="Sunny in Lyon."),  # the regenerated answer
        ],
        delay=0.01,
    )


def assistant(id: str) -> dict[str, Any]:
    """The client's copy of a stored answer (the server's copy is authoritative)."""
    return {"id": id, "role": "assistant", "parts": [{"type": "text", "text": "(as the client has it)"}]}


class Send(Protocol):
    def __call__(
        self,
        messages: list[dict[str, Any]],
        *,
        trigger: str = ...,
        message_id: str | None = ...,
        started: asyncio.Event | None = ...,
    ) -> Awaitable[list[dict[str, Any]]]: ...


def transcript_body(messages: list[dict[str, Any]], trigger: str, message_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": messages, "trigger": trigger}
    if message_id is not None:
        body["messageId"] = message_id
    return body


def http_sender(http: httpx.AsyncClient, chat_id: str) -> Send:
    async def send(
        messages: list[dict[str, Any]],
        *,
        trigger: str = "submit-message",
        message_id: str | None = None,
        started: asyncio.Event | None = None,
    ) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = []
        body = {"id": chat_id, **transcript_body(messages, trigger, message_id)}
        async with http.stream("POST", "/api/chat", json=body) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[len("data: "):]))
                    if started is not None:
                        started.set()
        return chunks

    return send


class WsChat:
    """A cf_agent_* client that keeps several chat requests open on one connection."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.chunks: dict[str, list[dict[str, Any]]] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.done: dict[str, asyncio.Future[list[dict[str, Any]]]] = {}

    async def read(self) -> None:
        async for raw in self.ws:
            frame = json.loads(raw)
            stream_id = frame.get("id")
            if frame.get("type") != "cf_agent_use_chat_response" or stream_id not in self.done:
                continue
            if frame["done"]:
                assert "error" not in frame, frame
                self.done[stream_id].set_result(self.chunks[stream_id])
            else:
                self.chunks[stream_id].append(json.loads(frame["body"]))
                self.started[stream_id].set()

    async def send(
        self,
        messages: list[dict[str, Any]],
        *,
        trigger: str = "submit-message",
        message_id: str | None = None,
        started: asyncio.Event | None = None,
    ) -> list[dict[str, Any]]:
        request_id = f"req{next(self.ids)}"
        self.chunks[request_id] = []
        self.started[request_id] = started or asyncio.Event()
        self.done[request_id] = asyncio.get_running_loop().create_future()
        init = {"method": "POST", "body": json.dumps(transcript_body(messages, trigger, message_id))}
        await self.ws.send(json.dumps({"type": "cf_agent_use_chat_request", "id": request_id, "init": init}))
        return await asyncio.wait_for(self.done[request_id], TIMEOUT)


async def while_in_flight(side: Send, messages: list[dict[str, Any]], request: Callable[[], Awaitable[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Run ``request`` once the turn for ``messages`` (sent by ``side``) is streaming."""
    started = asyncio.Event()
    in_flight = asyncio.create_task(side(messages, started=started))
    await asyncio.wait_for(started.wait(), TIMEOUT)
    chunks = await request()
    await in_flight
    return chunks


async def play(front: str, side: str) -> tuple[list[dict[str, Any]], ScriptedModel]:
    """The conversation, with its edit and regeneration sent over ``front`` while a turn sent
    over ``side`` streams; returns the final history and the model (to see what it was sent)."""
    model = weather_script()
    agent = Think(model, tools=[get_weather], store=":memory:", load_entrypoints=False)
    async with AsyncExitStack() as stack:
        base = await stack.enter_async_context(running_server(create_app(agent)))
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=TIMEOUT))
        ws = await stack.enter_async_context(connect(base.replace("http://", "ws://") + "/agents/think/c"))
        chat = WsChat(ws)
        reader = asyncio.create_task(chat.read())
        senders: dict[str, Send] = {"http": http_sender(http, "c"), "ws": chat.send}
        send = senders[front]

        first = await send([user("Weather?", "u1")])
        a1 = first[0]["messageId"]
        # useChat's sendMessage({text, messageId: "u1"}) edits u1: the client drops what followed.
        await while_in_flight(
            senders[side],
            [user("Weather?", "u1"), assistant(a1), user("Tell me more.", "u2")],
            lambda: send([user("Weather, in French?", "u1")], message_id="u1"),
        )
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
        e1 = history[-1]["id"]
        # useChat's regenerate() drops the answer and resends what came before it.
        regenerated = await while_in_flight(
            senders[side],
            [user("Weather, in French?", "u1"), assistant(e1), user("And tomorrow?", "u3")],
            lambda: send([user("Weather, in French?", "u1")], trigger="regenerate-message", message_id=e1),
        )
        assert "".join(c["delta"] for c in regenerated if c["type"] == "text-delta") == "Sunny in Lyon."
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    return history, model


def well_formed(history: list[dict[str, Any]]) -> None:
    roles = [m["role"] for m in history]
    assert roles == ["user", "assistant"] * (len(roles) // 2), roles
    for message in history:
        for part in message["parts"]:
            if part["type"].startswith("tool-"):
                assert part["state"] == "output-available" and "output" in part, part


def comparable(history: list[dict[str, Any]]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """The history with the server-made assistant message ids left out."""
    return [(m["role"], m["id"] if m["role"] == "user" else "", m["parts"]) for m in history]


async def test_edit_and_regenerate_with_a_turn_in_flight_end_the_same_over_both_transports() -> None:
    results = {(front, side): await play(front, side) for front in TRANSPORTS for side in TRANSPORTS}
    reference, _ = results[("http", "http")]
    well_formed(reference)
    assert [(m["id"], m["parts"][-1].get("text")) for m in reference][0] == ("u1", "Weather, in French?")
    tools = [(p["toolCallId"], p["output"]) for p in reference[1]["parts"] if p["type"] == "tool-get_weather"]
    assert tools == [("call_lyon", {"city": "Lyon", "sky": "sunny"})]
    assert reference[1]["parts"][-1]["text"] == "Sunny in Lyon."
    for (front, side), (history, model) in results.items():
        assert comparable(history) == comparable(reference), (front, side)
        # Each request was applied after the in-flight turn finished, on the history it left:
        # the edited turn and the regeneration saw only the edited question.
        assert [m.content for m in model.requests[3].messages] == ["Weather, in French?"], (front, side)
        assert [m.role for m in model.requests[5].messages] == ["user"], (front, side)


# -- the reconciliation itself ----------------------------------------------------------------------


def ui_messages(*messages: dict[str, Any]) -> list[UIMessage]:
    return [UIMessage.model_validate(m) for m in messages]


def pending_call(id: str, call_id: str, state: str = "input-available") -> dict[str, Any]:
    return {"id": id, "role": "assistant", "parts": [{"type": "tool-pick", "toolCallId": call_id, "state": state, "input": {}}]}


def test_an_edit_cuts_the_edited_message_and_what_followed_then_appends_the_clients_version() -> None:
    history = ui_messages(user("a", "u1"), assistant("a1"), user("b", "u2"), assistant("a2"))
    plan = reconcile(history, ui_messages(user("a, edited", "u1")), "submit-message", "u1")
    assert plan.cut == ["u1", "a1", "u2", "a2"] and not plan.continuation
    assert [(m.id, m.text) for m in plan.append] == [("u1", "a, edited")]


def test_a_resent_settled_tool_part_without_a_new_message_is_a_continuation_that_cuts_nothing() -> None:
    history = ui_messages(user("pick", "u1"), pending_call("a1", "c1"))
    settled = pending_call("a1", "c1", "output-available")
    settled["parts"][0]["output"] = "blue"
    # The AI SDK names the answered message in messageId; that must not cut it.
    plan = reconcile(history, ui_messages(user("pick", "u1"), settled), "submit-message", "a1")
    assert plan.continuation and plan.cut == [] and plan.append == []
    assert plan.answers == [ToolAnswer("c1", output="blue")]


def test_an_approval_resent_in_the_transcript_is_an_answer() -> None:
    history = ui_messages(user("mail", "u1"), pending_call("a1", "c1", "approval-requested"))
    answered = pending_call("a1", "c1", "approval-responded")
    answered["parts"][0]["approval"] = {"id": "c1", "approved": False, "reason": "not now"}
    plan = reconcile(history, ui_messages(user("mail", "u1"), answered))
    assert plan.answers == [ToolAnswer("c1", approved=False, reason="not now")] and plan.continuation


def test_a_regeneration_cuts_from_the_regenerated_message_and_answers_nothing() -> None:
    history = ui_messages(user("pick", "u1"), pending_call("a1", "c1"), user("more", "u2"), assistant("a2"))
    plan = reconcile(history, ui_messages(user("pick", "u1")), "regenerate-message", "a1", [ToolAnswer("c1", output=1)])
    assert plan.cut == ["a1", "u2", "a2"] and plan.answers == [] and plan.append == []


async def test_answers_that_leave_a_call_waiting_run_no_turn() -> None:
    model = ScriptedModel([Step(tool_calls=[call("pick", {}, id="c1"), call("pick", {}, id="c2")])])
    from think_core import Tool

    agent = Think(model, tools=[Tool.client("pick", "Pick.")], store=":memory:", load_entrypoints=False)
    session = agent.session("s")
    await session.chat("pick two")
    transcript = ClientTranscript(answers=[ToolAnswer("c1", output=1)])
    assert [c async for c in session.stream_transcript(transcript)] == []
    assert transcript.continuation and [m.role for m in transcript.answered] == ["assistant"]
    parts = {p["toolCallId"]: p["state"] for p in (await session.messages())[-1].parts if "toolCallId" in p}
    assert parts == {"c1": "output-available", "c2": "input-available"}
    assert len(model.requests) == 1
    agent.close()
