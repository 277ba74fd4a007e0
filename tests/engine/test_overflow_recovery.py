"""Error classification driving recovery: reactive compaction, bounded retries, the proactive
guard and ``compact_after``."""

from __future__ import annotations

import json

from tests.recorder import Recorder
from think_core import ProviderError, tool
from think_core.agent import Think
from think_core.models.base import ModelRequest
from think_core.models.scripted import ScriptedModel, Step, call
from think_plugins.overflow import OverflowClassifier

OVERFLOW = ProviderError(
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
    status=400,
    code="context_length_exceeded",
    type="invalid_request_error",
)


def summarizer(messages, budget):
    return f"{len(messages)} earlier messages about numbers."


async def seed(session, turns: int) -> None:
    for i in range(turns):
        await session.add_messages(
            [
                {"role": "user", "parts": [{"type": "text", "text": f"question {i} " + "lorem ipsum " * 40}]},
                {"role": "assistant", "parts": [{"type": "text", "text": f"answer {i} " + "dolor sit " * 40}]},
            ]
        )


def compacting_agent(model, rec=None, **kwargs) -> Think:
    plugins = [OverflowClassifier()] + ([rec] if rec else [])
    kwargs.setdefault("compaction", {"tail_tokens": 300})
    return Think(model, plugins=plugins, load_entrypoints=False, summarizer=summarizer, **kwargs)


async def test_overflow_then_success_after_compaction():
    rec = Recorder()
    model = ScriptedModel([Step(text="partial that must vanish", error=OVERFLOW, error_after_output=True), "Fits now."])
    agent = compacting_agent(model, rec, context_overflow={"reactive": True})
    session = agent.session("s")
    await seed(session, 6)
    result = await session.chat("final question")
    assert result.status == "completed" and result.text == "Fits now."
    assert [c.continuation for c in rec.contexts["before_turn"]] == [False, False]
    assert len(model.requests[1].messages) < len(model.requests[0].messages)
    assert "earlier messages about numbers" in model.requests[1].messages[1].content
    stored = await session.messages()
    assert all("partial that must vanish" not in m.text for m in stored)
    assert len(stored) == 14  # originals kept: compaction is non-destructive
    assert "on_chat_error" not in rec.names()
    assert session.compaction_events[0].reason == "reactive"


async def test_second_overflow_is_terminal_with_classification():
    rec = Recorder()
    model = ScriptedModel([Step(error=OVERFLOW), Step(error=OVERFLOW)])
    agent = compacting_agent(model, rec, context_overflow={"reactive": True, "max_retries": 1})
    session = agent.session("s")
    await seed(session, 6)
    result = await session.chat("again")
    assert result.status == "error"
    assert len(model.requests) == 2
    ctx = rec.contexts["on_chat_error"][0]
    assert ctx.classification == "context_overflow" and ctx.stage == "stream"
    assert rec.contexts["on_chat_response"][0].status == "error"


async def test_overflow_without_reactive_recovery_is_terminal_at_once():
    model = ScriptedModel([Step(error=OVERFLOW)])
    agent = compacting_agent(model)
    session = agent.session("s")
    await seed(session, 3)
    assert (await session.chat("x")).status == "error"
    assert len(model.requests) == 1


async def test_recovery_stops_when_compaction_cannot_shrink():
    model = ScriptedModel([Step(error=OVERFLOW), "unreachable"])
    agent = compacting_agent(model, context_overflow={"reactive": True, "max_retries": 3})
    session = agent.session("s")
    result = await session.chat("only one short message")  # nothing to compact
    assert result.status == "error" and len(model.requests) == 1


async def test_overflow_on_a_continuation_is_recovered():
    rec = Recorder()
    model = ScriptedModel([Step(error=OVERFLOW), "…and they lived happily."])
    agent = compacting_agent(model, rec, context_overflow={"reactive": True})
    session = agent.session("s")
    await seed(session, 6)
    await session.add_messages([{"role": "assistant", "parts": [{"type": "text", "text": "Once upon a time"}]}])
    result = await session.continue_last_turn()
    assert result.status == "completed" and result.continuation is True
    assert [c.continuation for c in rec.contexts["before_turn"]] == [True, False]


async def test_transient_error_before_output_is_retried_but_not_after_output():
    overloaded = ProviderError("Overloaded", status=529, type="overloaded_error")
    rec = Recorder()
    model = ScriptedModel([Step(error=overloaded), "Recovered."])
    agent = compacting_agent(model, rec, retry={"base_delay": 0.01})
    result = await agent.session("a").chat("hi")
    assert result.status == "completed" and result.text == "Recovered."
    assert len(model.requests) == 2

    later = ScriptedModel([Step(text="Half an answ", error=overloaded, error_after_output=True), "never"])
    agent2 = compacting_agent(later, retry={"base_delay": 0.01})
    failed = await agent2.session("b").chat("hi")
    assert failed.status == "error" and len(later.requests) == 1
    assert failed.message.text == "Half an answ"


async def test_rate_limit_retry_honours_retry_after_and_is_bounded():
    limited = ProviderError("Rate limit reached", status=429, code="rate_limit_exceeded", headers={"retry-after-ms": "20"})
    model = ScriptedModel([Step(error=limited)] * 3 + ["late"])
    agent = compacting_agent(model, retry={"max_retries": 2, "base_delay": 5})
    result = await agent.session("s").chat("hi")
    assert result.status == "error" and len(model.requests) == 3  # 1 attempt + 2 retries


async def test_proactive_guard_compacts_before_a_step():
    rec = Recorder()

    def step(request: ModelRequest):
        return Step(text="ok")

    model = ScriptedModel([step], repeat=True)
    agent = compacting_agent(model, rec, context_overflow={"proactive": {"max_input_tokens": 400, "headroom": 0.9}})
    session = agent.session("s")
    await seed(session, 8)
    await session.chat("first")  # its step reports input tokens above the threshold
    assert session.compaction_events == []
    await session.chat("second")
    assert [e.reason for e in session.compaction_events] == ["proactive"]
    assert len(model.requests[1].messages) < len(model.requests[0].messages)


class ContextLimitedModel:
    """Wraps a scripted model: a request over ``limit`` estimated tokens is an overflow error,
    as a real provider would answer."""

    provider = "limited"
    model_id = "limited"

    def __init__(self, inner: ScriptedModel, limit: int) -> None:
        self.inner = inner
        self.limit = limit
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest):
        self.requests.append(request)
        size = sum(len(m.model_dump_json()) for m in request.messages) // 4
        if size > self.limit:
            raise OVERFLOW
        async for event in self.inner.stream(request):
            yield event


async def test_two_hundred_turns_keep_running_under_compact_after():
    @tool(read_only=True)
    def lookup(n: int) -> dict:
        """Look a number up."""
        return {"n": n, "square": n * n, "note": "x" * 80}

    def step(request: ModelRequest):
        last = request.messages[-1]
        if last.role == "tool":
            return Step(text=f"The square is {json.loads(json.dumps(last.output))['square']}.")
        return Step(text="Looking it up.", tool_calls=[call("lookup", {"n": len(request.messages)})])

    model = ContextLimitedModel(ScriptedModel([step], repeat=True), limit=1500)
    agent = compacting_agent(model, tools=[lookup], context_overflow={"reactive": True})
    session = agent.session("long")
    session.compact_after(800)
    for i in range(200):
        result = await session.chat(f"turn {i}: what is the square?")
        assert result.status == "completed", (i, result.error)
    assert len(session.compaction_events) > 10
    assert len(await session.messages()) == 400  # nothing was deleted
    for request in model.requests:
        calls = {c.id for m in request.messages if m.role == "assistant" for c in m.tool_calls}
        results = {m.tool_call_id for m in request.messages if m.role == "tool"}
        assert calls == results, "a tool call was separated from its result"
