"""A chat request whose body cannot be parsed never becomes a turn, yet still reaches the error
hooks: ``classify_chat_error`` and ``on_chat_error`` with ``stage="parse"`` (its answer is the
error the client gets), and one ``chat:request:failed`` record. Real server, real clients."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from tests.support import agents
from tests.support.http_chat import api
from tests.support.logs import failure_events
from tests.support.web import chat_request, ui_text, user
from tests.support.ws import client, serve
from think_core import hookimpl
from think_core.models.scripted import ScriptedModel, Step


class ErrorHooks:
    def __init__(self) -> None:
        self.classified: list[Any] = []
        self.errors: list[tuple[BaseException, Any]] = []

    @hookimpl
    def classify_chat_error(self, error: BaseException, ctx: Any) -> str:
        self.classified.append(ctx.stage)
        return "fatal"

    @hookimpl
    def on_chat_error(self, error: BaseException, ctx: Any) -> str:
        self.errors.append((error, ctx))
        return f"could not read your request ({ctx.stage})"


async def test_a_websocket_chat_request_with_a_broken_body_fires_on_chat_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = ErrorHooks()
    agent = agents.make_agent(ScriptedModel([Step(text="Fine.")]), plugins=[hooks], store=":memory:")
    with caplog.at_level(logging.INFO, logger="think.events"):
        async with serve(agent) as base, client(base) as c:
            await c.recv()
            await c.send({"type": "cf_agent_use_chat_request", "id": "bad1", "init": {"method": "POST", "body": "{nope"}})
            failed = await c.recv()
            assert failed["type"] == "cf_agent_use_chat_response" and failed["id"] == "bad1"
            assert failed["done"] is True and failed["error"] is True
            assert failed["body"] == "could not read your request (parse)"  # on_chat_error's answer
            await c.send("this is not json")  # a frame too broken to tell what it was
            error = await c.recv()
            assert error["type"] == "cf_agent_error" and error["error"]["type"] == "invalid_json"
            await c.send(chat_request("req2", [user("again", "u1")]))
            chunks, _ = await c.stream("req2")
    assert ui_text(chunks) == "Fine."
    assert hooks.classified == ["parse", "parse"]
    [(first, ctx), _] = hooks.errors
    assert ctx.stage == "parse" and ctx.messages_persisted is False and ctx.classification == "fatal"
    assert ctx.session.id == "s1" and ctx.request_id == "bad1" and "not valid JSON" in str(first)
    events = failure_events(caplog)
    assert [(e.__dict__["stage"], e.__dict__["persisted"]) for e in events] == [("parse", False), ("parse", False)]


async def test_an_http_chat_body_that_does_not_parse_fires_on_chat_error(caplog: pytest.LogCaptureFixture) -> None:
    hooks = ErrorHooks()
    agent = agents.make_agent(ScriptedModel([]), plugins=[hooks], store=":memory:")
    with caplog.at_level(logging.INFO, logger="think.events"):
        async with api(agent) as http:
            response = await http.post("/api/chat", content=json.dumps({"id": "c1", "messages": "hi"}),
                                       headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"] == {"type": "invalid_request", "message": "could not read your request (parse)"}
    [(_, ctx)] = hooks.errors
    assert ctx.stage == "parse" and ctx.session.id == "c1" and ctx.classification == "fatal"
    [event] = failure_events(caplog)
    assert event.__dict__["session_id"] == "c1" and event.__dict__["stage"] == "parse"
    assert await agent.session("c1").messages() == []
