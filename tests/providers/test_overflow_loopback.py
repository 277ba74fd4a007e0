"""Error classification and recovery against a loopback server speaking the providers' real
wire formats: context overflow compacted and retried, overloaded streams retried only before
output: a stream that already reached the user is never replayed."""

from __future__ import annotations

from typing import Any

from tests.loopback import LoopbackServer, Reply, sse_body  # noqa: F401
from tests.recorder import Recorder
from tests.support.wire import FAST, an_stream, oa_text, openai_model
from think_core.agent import Think
from think_core.models.anthropic import AnthropicModel
from think_core.turn.compaction import SUMMARY_SYSTEM
from think_plugins.overflow import OverflowClassifier

OVERFLOW_BODY = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in "
        "131000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def overflow_reply() -> Reply:
    return Reply.json(OVERFLOW_BODY, status=400)


async def seed_long_turns(session, turns: int = 6) -> None:
    for i in range(turns):
        await session.add_messages(
            [
                {"role": "user", "parts": [{"type": "text", "text": f"question {i} " + "lorem " * 60}]},
                {"role": "assistant", "parts": [{"type": "text", "text": f"answer {i} " + "ipsum " * 60}]},
            ]
        )


def overflow_agent(model: Any, rec: Recorder, **kwargs: Any) -> Think:
    return Think(
        model,
        plugins=[OverflowClassifier(), rec],
        load_entrypoints=False,
        context_overflow={"reactive": True, "max_retries": 1},
        compaction={"tail_tokens": 200, "summary_budget_tokens": 500},
        **kwargs,
    )


async def test_overflow_is_compacted_with_the_model_and_the_turn_succeeds(loopback: LoopbackServer):
    loopback.enqueue(overflow_reply(), Reply.sse(oa_text("They discussed lorem and ipsum.")), Reply.sse(oa_text("Done.")))
    rec = Recorder()
    agent = overflow_agent(openai_model(loopback), rec)
    session = agent.session("s")
    await seed_long_turns(session)
    result = await session.chat("and the last question?")
    assert result.status == "completed" and result.text == "Done."

    first, summary, retried = (r.json for r in loopback.requests)
    assert summary["messages"][0] == {"role": "system", "content": SUMMARY_SYSTEM}
    assert len(summary["messages"][1]["content"]) <= 500 * 4 + 50  # the summary request is budgeted
    assert len(retried["messages"]) < len(first["messages"])
    # No system prompt unless the application gives one: the first question, the summary of the
    # rest, then the new question.
    assert retried["messages"][0]["content"].startswith("question 0 ")
    assert "They discussed lorem and ipsum." in retried["messages"][1]["content"]
    assert retried["messages"][-1] == {"role": "user", "content": "and the last question?"}
    assert [c.continuation for c in rec.contexts["before_turn"]] == [False, False]
    assert "on_chat_error" not in rec.names()


async def test_a_second_overflow_is_terminal(loopback: LoopbackServer):
    loopback.enqueue(overflow_reply(), Reply.sse(oa_text("summary")), overflow_reply())
    rec = Recorder()
    agent = overflow_agent(openai_model(loopback), rec)
    session = agent.session("s")
    await seed_long_turns(session)
    result = await session.chat("again")
    assert result.status == "error" and "maximum context length" in result.error
    assert len(loopback.requests) == 3
    ctx = rec.contexts["on_chat_error"][0]
    assert ctx.classification == "context_overflow"
    assert rec.contexts["on_chat_response"][0].status == "error"


async def test_an_overflow_on_a_continuation_is_recovered(loopback: LoopbackServer):
    loopback.enqueue(overflow_reply(), Reply.sse(oa_text("summary")), Reply.sse(oa_text(" happily ever after.")))
    rec = Recorder()
    agent = overflow_agent(openai_model(loopback), rec)
    session = agent.session("s")
    await seed_long_turns(session)
    await session.add_messages([{"role": "assistant", "parts": [{"type": "text", "text": "Once upon a time"}]}])
    result = await session.continue_last_turn()
    assert result.status == "completed" and result.continuation
    assert [c.continuation for c in rec.contexts["before_turn"]] == [True, False]
    last = loopback.requests[-1].json["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith("Continue your previous response")


def overloaded(after_text: str | None) -> str:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_o", "type": "message", "role": "assistant", "content": [],
                                              "model": "claude-sonnet-4-5", "usage": {"input_tokens": 9, "output_tokens": 1}}},
    ]
    if after_text:
        events += [
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": after_text}},
        ]
    events.append({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    return sse_body(*events, event_names=True)


def anthropic(server: LoopbackServer) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-5", base_url=server.url, api_key="sk-ant", retry_policy=FAST)


async def test_overloaded_mid_stream_before_text_is_retried(loopback: LoopbackServer):
    ok = an_stream({"type": "text", "text": "Hello after the storm."}, stop="end_turn", input_tokens=9, output_tokens=4)
    loopback.enqueue(Reply.sse(overloaded(None)), Reply.sse(ok))
    rec = Recorder()
    agent = overflow_agent(anthropic(loopback), rec)
    result = await agent.session("s").chat("hi")
    assert result.status == "completed" and result.text == "Hello after the storm."
    assert len(loopback.requests) == 2


async def test_overloaded_after_text_is_not_retried_and_the_partial_is_kept(loopback: LoopbackServer, tmp_path):
    loopback.enqueue(Reply.sse(overloaded("Half an ans")))
    rec = Recorder()
    agent = overflow_agent(anthropic(loopback), rec, store=str(tmp_path / "db.sqlite"))
    result = await agent.session("s").chat("hi")
    assert result.status == "error" and "Overloaded" in result.error
    assert len(loopback.requests) == 1
    assert rec.contexts["on_chat_error"][0].classification == "transient"
    stored = (await agent.session("s").messages())[-1]
    assert stored.role == "assistant" and stored.text == "Half an ans"
    agent.close()
