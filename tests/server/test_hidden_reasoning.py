"""``send_reasoning=False`` keeps reasoning out of what is streamed *and* what is served back:
``session.messages()``, the ``cf_agent_chat_messages`` snapshot and
``/api/sessions/{id}/messages``. The reasoning is stored (marked hidden) for the model only."""

from __future__ import annotations

import json
from typing import Any

from tests.support import agents
from tests.support.http_chat import api
from tests.support.web import chat_request, user
from tests.support.ws import client, serve
from think_core import hookimpl
from think_core.models.scripted import ScriptedModel, Step


class NoReasoningForGuests:
    """A Think ``beforeTurn`` turning reasoning off for one turn, with the camelCase key."""

    @hookimpl
    def before_turn(self, ctx: Any) -> dict[str, Any] | None:
        return {"sendReasoning": False} if (ctx.body or {}).get("guest") else None


def reasoning_parts(messages: list[Any]) -> list[Any]:
    return [p for m in messages for p in (m["parts"] if isinstance(m, dict) else m.parts) if p["type"] == "reasoning"]


async def test_hidden_reasoning_is_served_by_no_path_and_the_model_still_sees_it() -> None:
    model = ScriptedModel([Step(reasoning="secret plan", text="ok"), Step(reasoning="open plan", text="fine")])
    agent = agents.make_agent(model, plugins=[NoReasoningForGuests()], store=":memory:")
    async with serve(agent) as base:
        async with client(base) as c:
            await c.recv()
            await c.send(chat_request("r1", [user("hello", "u1")], guest=True))
            chunks, _ = await c.stream("r1")
            assert not [ch for ch in chunks if ch["type"].startswith("reasoning")]
        async with client(base) as again:  # a client connecting later gets the snapshot
            snapshot = await again.snapshot()
            assert len(snapshot) == 2 and reasoning_parts(snapshot) == []
    session = agent.session("s1")
    assert reasoning_parts(await session.messages()) == []
    stored = await session.history()
    assert [p["text"] for p in reasoning_parts(stored)] == ["secret plan"]
    # A later turn that shows reasoning serves its own, never the hidden one; the model sees both.
    result = await session.chat("and now?")
    assert [p["text"] for p in reasoning_parts(await session.messages())] == ["open plan"]
    earlier = [m for m in model.requests[1].messages if m.role == "assistant"]
    assert earlier and earlier[0].reasoning == "secret plan"
    assert result.status == "completed"


async def test_the_http_messages_endpoint_leaves_hidden_reasoning_out() -> None:
    model = ScriptedModel([Step(reasoning="secret plan", text="ok")])
    agent = agents.make_agent(model, store=":memory:", send_reasoning=False)
    await agent.session("c1").chat("hello")
    async with api(agent) as http:
        response = await http.get("/api/sessions/c1/messages")
    assert response.status_code == 200
    body = response.json()
    messages = body["messages"] if isinstance(body, dict) else body
    assert len(messages) == 2 and reasoning_parts(messages) == []
    assert "secret plan" not in json.dumps(body)


class KeepsResponses:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    @hookimpl
    def on_chat_response(self, result: Any) -> None:
        self.messages.append(result.message)


async def test_hidden_reasoning_is_in_no_result_a_caller_or_a_hook_receives() -> None:
    """Issue 35: ``TurnResult.message``, ``chat(on_done=...)``'s result and ``on_chat_response``'s
    message are what a client is served; the stored answer keeps the reasoning for the model."""
    model = ScriptedModel([Step(reasoning="secret plan", text="ok"), Step(reasoning="secret two", text="fine")])
    responses = KeepsResponses()
    agent = agents.make_agent(model, plugins=[responses], store=":memory:", send_reasoning=False)
    session = agent.session("s1")
    done: list[Any] = []
    received = [await session.chat("hello"), await session.chat("again", on_done=done.append)]
    received += done + responses.messages
    assert len(received) == 5 and all(r is not None for r in received)
    for item in received:
        dumped = json.dumps(item.model_dump(mode="json"))
        assert "secret" not in dumped and '"reasoning"' not in dumped, dumped
    assert [r.text for r in received[:2]] == ["ok", "fine"]
    stored = await session.history()
    assert [p["text"] for p in reasoning_parts(stored)] == ["secret plan", "secret two"]
