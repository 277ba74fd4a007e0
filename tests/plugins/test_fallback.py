"""The bundled ``fallback`` plugin against real provider wire formats: an OpenAI model answering
503s hands the step to an Anthropic model; output that has streamed is never handed over."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.loopback import LoopbackServer, Reply, sse_body
from tests.support.wire import an_stream, anthropic_model, oa_events, oa_text, openai_model
from think_core import StepContext, hookimpl
from think_core.agent import Think
from think_plugins.analytics import Analytics, read_sqlite_points
from think_plugins.fallback import Fallback
from think_plugins.overflow import OverflowClassifier

OVERLOADED = {"error": {"message": "The server is overloaded", "type": "server_error", "code": None}}


class RetryWatcher:
    """Records what ``before_step`` sees on each attempt (asked before ``fallback``, which
    answers a retry first and so hides it from later implementations)."""

    name = "retry_watcher"

    def __init__(self) -> None:
        self.seen: list[Any] = []

    @hookimpl(tryfirst=True)
    def before_step(self, ctx: StepContext) -> None:
        self.seen.append(ctx.retry)


def fallback_agent(primary: LoopbackServer, second: LoopbackServer, *plugins: Any, **settings: Any) -> Think:
    """OpenAI first, Anthropic next; errors classified by the bundled classifier (an entry point
    in a real install); no same-model retries by the engine."""
    return Think(
        openai_model(primary),
        store=":memory:",
        load_entrypoints=False,
        plugins=[Fallback({"models": [anthropic_model(second)], **settings}), OverflowClassifier(), *plugins],
        retry={"max_retries": 0},
    )


def overloaded(times: int) -> list[Reply]:
    return [Reply.json(OVERLOADED, status=503) for _ in range(times)]


async def test_503s_move_the_step_to_the_next_model_which_answers(loopback: LoopbackServer, tmp_path: Path) -> None:
    async with LoopbackServer() as anthropic:
        loopback.enqueue(*overloaded(3))  # the OpenAI model's own retries (FAST: 2) all fail
        anthropic.enqueue(Reply.sse(an_stream({"type": "text", "text": "From Claude."}, stop="end_turn",
                                               input_tokens=12, output_tokens=4)))
        watcher = RetryWatcher()
        db = tmp_path / "analytics.db"
        agent = Think(
            openai_model(loopback), store=":memory:", load_entrypoints=False,
            plugins=[Fallback(), OverflowClassifier(), watcher, Analytics()],
            settings={"fallback": {"models": [anthropic_model(anthropic)]}, "analytics": {"path": str(db)}},
        )
        try:
            chunks = [c async for c in agent.session("s").stream("hi")]
            for plugin in agent.plugin_manager.get_plugins():
                if isinstance(plugin, Analytics):
                    await plugin.drain()
        finally:
            await agent.aclose()
    assert [r.path for r in loopback.requests] == ["/v1/chat/completions"] * 3
    assert [r.path for r in anthropic.requests] == ["/v1/messages"]
    first, retry = watcher.seen
    assert first is None
    assert retry.attempt == 1 and retry.classification == "transient"
    assert getattr(retry.error, "status", None) == 503 and retry.model.provider == "openai"
    *provider_retries, notice = [c for c in chunks if c["type"] == "data-think-retry"]
    assert len(provider_retries) == 2 and all("model" not in c["data"] for c in provider_retries)
    assert notice["data"]["model"] == "anthropic:claude-sonnet-4-5" and notice["data"]["status"] == 503
    assert "".join(c.get("delta", "") for c in chunks if c["type"] == "text-delta") == "From Claude."
    [step] = [p for p in read_sqlite_points(db) if p["kind"] == "step"]
    assert step["blobs"][1] == "claude-sonnet-4-5"


async def test_the_step_record_names_the_model_that_answered(loopback: LoopbackServer) -> None:
    async with LoopbackServer() as anthropic:
        loopback.enqueue(*overloaded(3))
        anthropic.enqueue(Reply.sse(an_stream({"type": "text", "text": "ok"}, stop="end_turn",
                                               input_tokens=3, output_tokens=1)))
        steps: list[Any] = []

        class Steps:
            @hookimpl
            def on_step_finish(self, ctx: Any) -> None:
                steps.append(ctx)

        agent = fallback_agent(loopback, anthropic, Steps())
        try:
            result = await agent.session("s").chat("hi")
        finally:
            await agent.aclose()
    assert result.status == "completed" and result.text == "ok"
    [step] = steps
    assert step.model_id == "claude-sonnet-4-5"


async def test_no_fallback_after_output_has_streamed(loopback: LoopbackServer) -> None:
    async with LoopbackServer() as anthropic:
        # The OpenAI stream breaks off after some text: the step fails, but not before output.
        loopback.enqueue(Reply.sse(sse_body(*oa_events("Half an ", "answer")), disconnect_after=2))
        watcher = RetryWatcher()
        agent = fallback_agent(loopback, anthropic, watcher)
        try:
            result = await agent.session("s").chat("hi")
        finally:
            await agent.aclose()
    assert result.status == "error"
    assert anthropic.requests == []
    assert watcher.seen == [None]


async def test_an_error_outside_on_stays_on_the_model(loopback: LoopbackServer) -> None:
    async with LoopbackServer() as anthropic:
        loopback.enqueue(Reply.json({"error": {"message": "bad key", "type": "invalid_request_error"}}, status=401))
        agent = fallback_agent(loopback, anthropic)
        try:
            result = await agent.session("s").chat("hi")
        finally:
            await agent.aclose()
    assert result.status == "error" and "401" in (result.error or "")
    assert anthropic.requests == []


async def test_each_step_starts_from_the_turn_model_again(loopback: LoopbackServer) -> None:
    async with LoopbackServer() as anthropic:
        loopback.enqueue(*overloaded(3), Reply.sse(oa_text("From GPT.")))
        anthropic.enqueue(Reply.sse(an_stream({"type": "text", "text": "From Claude."}, stop="end_turn",
                                               input_tokens=3, output_tokens=1)))
        agent = fallback_agent(loopback, anthropic)
        try:
            session = agent.session("s")
            first = await session.chat("hi")
            second = await session.chat("again")
        finally:
            await agent.aclose()
    assert (first.text, second.text) == ("From Claude.", "From GPT.")


async def test_an_exhausted_quota_falls_back_when_on_says_fatal(loopback: LoopbackServer) -> None:
    quota = {"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
                       "type": "insufficient_quota", "code": "insufficient_quota"}}
    async with LoopbackServer() as anthropic:
        loopback.enqueue(*[Reply.json(quota, status=429)] * 3)  # the provider's own retries see it too
        anthropic.enqueue(Reply.sse(an_stream({"type": "text", "text": "Still here."}, stop="end_turn",
                                               input_tokens=3, output_tokens=1)))
        agent = fallback_agent(loopback, anthropic, on=["transient", "rate_limit", "fatal"])
        try:
            result = await agent.session("s").chat("hi")
        finally:
            await agent.aclose()
    assert result.status == "completed" and result.text == "Still here."
    assert len(anthropic.requests) == 1
