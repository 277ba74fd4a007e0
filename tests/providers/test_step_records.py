"""``StepResult.request`` is the provider request body as sent (never a credential),
``response`` its id, model and the headers worth keeping, ``warnings`` what was dropped on the
way. Real providers against the loopback server."""

from __future__ import annotations

import json
from typing import Any

from tests.loopback import LoopbackServer, Reply, sse_body  # noqa: F401
from tests.support.responses import responses_model, text_stream
from tests.support.wire import an_stream, anthropic_model, oa_text, openai_model
from think_core import ScriptedModel, hookimpl
from think_core.agent import Think
from think_core.types import StepResult


class Steps:
    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.steps: list[StepResult] = []

    @hookimpl
    def before_turn(self, ctx: Any) -> dict[str, Any] | None:
        return self.settings

    @hookimpl
    def on_step_finish(self, ctx: StepResult) -> None:
        self.steps.append(ctx)


async def run_turn(model: Any, plugin: Steps) -> StepResult:
    agent = Think(model=model, system="Be brief.", store=":memory:", load_entrypoints=False, plugins=[plugin])
    try:
        result = await agent.session("s").chat("hi")
    finally:
        await agent.aclose()
    assert result.status == "completed", result.error
    [step] = plugin.steps
    return step


async def test_the_step_record_holds_the_request_as_sent_and_the_response(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(oa_text("Hello"), headers={
        "x-request-id": "req_abc", "x-ratelimit-remaining-requests": "99", "set-cookie": "session=secret"}))
    step = await run_turn(openai_model(loopback), Steps({"temperature": 0.25}))
    sent = loopback.requests[0]
    assert step.request == sent.json  # exactly the body that went over the wire
    assert step.request["temperature"] == 0.25 and step.request["messages"][0]["content"] == "Be brief."
    assert "sk-test" not in json.dumps(step.request)  # the key went in a header, not the body
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert step.response == {
        "id": "chatcmpl-t", "model": "gpt-4o",
        "headers": {"x-request-id": "req_abc", "x-ratelimit-remaining-requests": "99"},
    }
    assert step.warnings == []


async def test_a_setting_the_provider_cannot_take_is_a_warning(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(an_stream({"type": "text", "text": "ok"}, stop="end_turn", input_tokens=3,
                                         output_tokens=1)))
    step = await run_turn(anthropic_model(loopback), Steps({"seed": 7, "temperature": 0.5}))
    assert "seed" not in loopback.requests[0].json and step.request == loopback.requests[0].json
    assert step.warnings == ["anthropic does not support the seed setting; it was not sent"]


async def test_the_responses_api_warns_about_stop_and_seed(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(text_stream("ok")))
    step = await run_turn(responses_model(loopback), Steps({"stopSequences": ["END"], "seed": 1}))
    assert step.request == loopback.requests[0].json
    assert sorted(step.warnings) == [
        "openai does not support the seed setting; it was not sent",
        "openai does not support the stop setting; it was not sent",
    ]


async def test_a_model_that_is_not_an_http_provider_has_no_request_body() -> None:
    step = await run_turn(ScriptedModel(["hi"]), Steps())
    assert step.request is None and step.response is not None and step.response["headers"] == {}
