"""A failed turn's error is part of the stored conversation, so every client (the page after a
reload, ``think chat``'s ``/history``) can show it — without ever storing an empty answer."""

from __future__ import annotations

from tests.loopback import LoopbackServer, Reply, sse_body
from tests.support.wire import oa_events
from think_core.agent import Think
from think_core.models.openai import OpenAIChatModel
from think_core.models.retry import RetryPolicy

UNKNOWN_MODEL = {"error": {"message": "The model `gpt-nope` does not exist or you do not have access to it.",
                           "type": "invalid_request_error", "param": None, "code": "model_not_found"}}


def unknown_model_agent(server: LoopbackServer) -> Think:
    model = OpenAIChatModel("gpt-nope", base_url=server.url + "/v1", api_key="sk-test",
                            retry_policy=RetryPolicy(max_retries=1, initial_delay=0.01, max_delay=0.02))
    return Think(model, store=":memory:", load_entrypoints=False, retry={"max_retries": 0})


async def test_an_error_before_any_output_is_noted_on_the_message_it_answered(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json(UNKNOWN_MODEL, status=404))
    agent = unknown_model_agent(loopback)
    try:
        session = agent.session("s")
        result = await session.chat("hi")
        assert result.status == "error"
        [user] = await session.messages()  # no empty answer is stored
        assert user.role == "user" and user.text == "hi"
        assert "HTTP 404" in user.metadata["error"] and "does not exist" in user.metadata["error"]
        assert user.metadata["error"] == result.error
    finally:
        await agent.aclose()


async def test_an_error_after_output_is_kept_with_the_partial_answer(loopback: LoopbackServer) -> None:
    # 5xx after retries: the stream breaks off after some text, which is kept with the error.
    loopback.enqueue(Reply.sse(sse_body(*oa_events("Half an ", "answer")), disconnect_after=2))
    agent = unknown_model_agent(loopback)
    try:
        session = agent.session("s")
        result = await session.chat("hi")
        assert result.status == "error"
        user, answer = await session.messages()
        assert user.metadata is None
        assert answer.role == "assistant" and answer.text.startswith("Half an")
        assert answer.metadata is not None and answer.metadata["error"] == result.error
    finally:
        await agent.aclose()
