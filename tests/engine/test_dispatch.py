"""The async dispatcher: pluggy's order, await-then-decide firstresult, failure policy, on_chunk."""

from __future__ import annotations

import asyncio
import gc
import logging
import warnings
from typing import Any

import pytest
from pydantic import ValidationError

from tests.support.contexts import tool_ctx
from think_core import (
    ChatErrorContext,
    ChunkContext,
    PluginError,
    PluginResultError,
    StepConfig,
    StepContext,
    StepResult,
    TextDelta,
    ToolCallContext,
    ToolCallDecision,
    TurnConfig,
    TurnContext,
    allow,
    block,
    hookimpl,
)
from think_core.hooks.dispatch import HookDispatcher
from think_core.hooks.plugins import build_plugin_manager


def relay_with(*plugins: object) -> HookDispatcher:
    return HookDispatcher(build_plugin_manager(load_entrypoints=False, plugins=plugins))


def turn_ctx() -> TurnContext:
    return TurnContext(
        session=None, request_id="r1", trigger="chat", system="", messages=[], tools={}, model=None
    )


def step_ctx() -> StepContext:
    return StepContext(
        session=None, request_id="r1", step_number=0, steps=[], model=None, messages=[]
    )


def step_result() -> StepResult:
    return StepResult(session=None, request_id="r1", step_number=0)


def error_ctx() -> ChatErrorContext:
    return ChatErrorContext(session=None, request_id="r1", stage="turn")


def chunk_ctx(text: str = "hi") -> ChunkContext:
    return ChunkContext(None, "r1", 0, TextDelta(text))


class Recorder:
    """A plugin that records its name into a shared list from sync implementations."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    @hookimpl
    def before_step(self, ctx: StepContext) -> None:
        self.log.append(self.name)

    @hookimpl
    def on_step_finish(self, ctx: StepResult) -> None:
        self.log.append(self.name)


class TryFirst(Recorder):
    @hookimpl(tryfirst=True)
    def before_step(self, ctx: StepContext) -> None:
        self.log.append(self.name)


class TryLast(Recorder):
    @hookimpl(trylast=True)
    def on_step_finish(self, ctx: StepResult) -> None:
        self.log.append(self.name)


# -- order --------------------------------------------------------------------------------


async def test_order_matches_pluggy_for_firstresult_and_broadcast() -> None:
    log: list[str] = []
    plugins = [
        TryFirst("a", log),
        Recorder("b", log),
        TryLast("c", log),
        Recorder("d", log),
    ]
    relay = relay_with(*plugins)
    pm = relay._pm

    pm.hook.before_step(ctx=step_ctx())
    pluggy_firstresult = log[:]
    log.clear()
    await relay.before_step(step_ctx())
    assert log == pluggy_firstresult == ["a", "d", "c", "b"]

    log.clear()
    pm.hook.on_step_finish(ctx=step_result())
    pluggy_broadcast = log[:]
    log.clear()
    await relay.on_step_finish(step_result())
    assert log == pluggy_broadcast == ["d", "b", "a", "c"]


async def test_registration_after_first_dispatch_is_picked_up() -> None:
    log: list[str] = []
    relay = relay_with(Recorder("first", log))
    await relay.before_step(step_ctx())
    relay._pm.register(Recorder("late", log), name="late")
    log.clear()
    await relay.before_step(step_ctx())
    assert log == ["late", "first"]
    relay._pm.unregister(name="late")
    log.clear()
    await relay.before_step(step_ctx())
    assert log == ["first"]


# -- firstresult ----------------------------------------------------------------------------


class AllowAll:
    name = "allow_all"

    @hookimpl
    def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision:
        return allow({"rewritten": True})


class AsyncNoOpinion:
    name = "async_no_opinion"

    def __init__(self) -> None:
        self.awaited = False

    @hookimpl
    async def before_tool_call(self, ctx: ToolCallContext) -> None:
        await asyncio.sleep(0)
        self.awaited = True
        return None


async def test_async_none_does_not_stop_firstresult() -> None:
    no_opinion = AsyncNoOpinion()
    relay = relay_with(AllowAll(), no_opinion)  # no_opinion registered last: it runs first
    decision = await relay.before_tool_call(tool_ctx())
    assert no_opinion.awaited
    assert decision == allow({"rewritten": True})


async def test_first_non_none_wins_and_later_impls_are_not_called() -> None:
    log: list[str] = []

    class Blocker:
        name = "blocker"

        @hookimpl
        async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision:
            log.append("blocker")
            return block("no")

    class Never:
        name = "never"

        @hookimpl
        async def before_tool_call(self, ctx: ToolCallContext) -> None:
            log.append("never")

    relay = relay_with(Never(), Blocker())
    assert await relay.before_tool_call(tool_ctx()) == block("no")
    assert log == ["blocker"]


async def test_no_implementations_means_none() -> None:
    relay = relay_with()
    assert await relay.before_turn(turn_ctx()) is None
    assert await relay.before_step(step_ctx()) is None
    assert await relay.before_tool_call(tool_ctx()) is None
    assert await relay.on_chat_error(RuntimeError("x"), error_ctx()) is None
    assert await relay.classify_chat_error(RuntimeError("x"), error_ctx()) is None


async def test_dict_results_are_coerced_to_the_config_models() -> None:
    class Configurer:
        name = "configurer"

        @hookimpl
        def before_turn(self) -> dict[str, Any]:  # asks for no arguments: pluggy opt-in
            return {"max_steps": 3, "system": "be brief"}

        @hookimpl
        async def before_step(self, ctx: StepContext) -> dict[str, Any]:
            return {"active_tools": ["search"]}

        @hookimpl
        def before_tool_call(self, ctx: ToolCallContext) -> dict[str, Any]:
            return {"action": "substitute", "output": 42}

    relay = relay_with(Configurer())
    assert await relay.before_turn(turn_ctx()) == TurnConfig(max_steps=3, system="be brief")
    assert await relay.before_step(step_ctx()) == StepConfig(active_tools=["search"])
    substituted = ToolCallDecision(action="substitute", output=42)
    assert await relay.before_tool_call(tool_ctx()) == substituted


@pytest.mark.parametrize("bad", ["allow", 1, {"action": "explode"}])
async def test_invalid_decision_is_a_type_error_naming_the_plugin(bad: object) -> None:
    class Junk:
        name = "junk_decider"

        @hookimpl
        def before_tool_call(self, ctx: ToolCallContext) -> object:
            return bad

    with pytest.raises(TypeError, match="junk_decider"):
        await relay_with(Junk()).before_tool_call(tool_ctx())


@pytest.mark.parametrize(
    ("hook", "bad", "cause"),
    [
        ("before_turn", {"max_steps": "many"}, ValidationError),
        ("before_step", ["search"], TypeError),
        ("before_tool_call", {"action": "allow", "input": 3}, ValidationError),
    ],
)
async def test_an_invalid_decision_is_a_plugin_error_naming_plugin_and_hook(
    hook: str, bad: object, cause: type[Exception]
) -> None:
    plugin = type("BadDecider", (), {"name": "bad_decider", hook: hookimpl(lambda self: bad)})()
    relay = relay_with(plugin)
    ctx = {"before_turn": turn_ctx, "before_step": step_ctx, "before_tool_call": tool_ctx}[hook]()
    with pytest.raises(PluginError, match=f"'bad_decider' returned an invalid result from {hook}") as raised:
        await getattr(relay, hook)(ctx)
    assert isinstance(raised.value, PluginResultError)
    assert (raised.value.plugin_name, raised.value.hook) == ("bad_decider", hook)
    assert isinstance(raised.value.error, cause) and raised.value.__cause__ is raised.value.error


async def test_decision_hook_exceptions_propagate() -> None:
    class Exploding:
        name = "exploding"

        @hookimpl
        async def before_turn(self, ctx: TurnContext) -> None:
            raise ValueError("guard failure")

    with pytest.raises(PluginError, match="exploding") as raised:
        await relay_with(Exploding()).before_turn(turn_ctx())
    assert isinstance(raised.value.error, ValueError) and str(raised.value.error) == "guard failure"
    assert raised.value.hook == "before_turn" and raised.value.__cause__ is raised.value.error


async def test_cancellation_propagates_out_of_firstresult_dispatch() -> None:
    started = asyncio.Event()
    later_called: list[bool] = []

    class Later:
        name = "later"

        @hookimpl
        def before_tool_call(self, ctx: ToolCallContext) -> None:
            later_called.append(True)

    class Slow:
        name = "slow"

        @hookimpl
        async def before_tool_call(self, ctx: ToolCallContext) -> None:
            started.set()
            await asyncio.Event().wait()

    relay = relay_with(Later(), Slow())
    task = asyncio.create_task(relay.before_tool_call(tool_ctx()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert later_called == []


async def test_no_coroutine_is_left_unawaited() -> None:
    no_opinion = AsyncNoOpinion()

    class AsyncAllow:
        name = "async_allow"

        def __init__(self) -> None:
            self.observed = False

        @hookimpl
        async def before_tool_call(self) -> ToolCallDecision:
            return allow()

        @hookimpl
        async def after_tool_call(self) -> None:
            await asyncio.sleep(0)
            self.observed = True

    async_allow = AsyncAllow()
    never_reached = AsyncNoOpinion()
    never_reached.name = "never_reached"  # type: ignore[misc]
    relay = relay_with(never_reached, async_allow, no_opinion)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert await relay.before_tool_call(tool_ctx()) == allow()
        await relay.after_tool_call(object())  # type: ignore[arg-type]
        gc.collect()
    assert no_opinion.awaited and not never_reached.awaited and async_allow.observed
    assert [w for w in caught if issubclass(w.category, RuntimeWarning)] == []


# -- broadcast ------------------------------------------------------------------------------


async def test_broadcast_awaits_every_async_impl_in_order() -> None:
    log: list[str] = []

    def observer(name: str) -> object:
        class Observer:
            @hookimpl
            async def after_tool_call(self, ctx: Any) -> None:
                await asyncio.sleep(0)
                log.append(f"{name}:after_tool_call")

            @hookimpl
            async def on_chat_response(self, result: Any) -> None:
                await asyncio.sleep(0)
                log.append(f"{name}:on_chat_response")

        plugin = Observer()
        plugin.name = name  # type: ignore[attr-defined]
        return plugin

    relay = relay_with(observer("one"), observer("two"))
    await relay.after_tool_call(object())  # type: ignore[arg-type]
    await relay.on_chat_response(object())  # type: ignore[arg-type]
    assert log == [
        "two:after_tool_call",
        "one:after_tool_call",
        "two:on_chat_response",
        "one:on_chat_response",
    ]


async def test_observer_failure_is_logged_with_plugin_name_and_isolated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []

    class Failing:
        name = "failing_observer"

        @hookimpl
        async def on_step_finish(self, ctx: StepResult) -> None:
            raise RuntimeError("observer bug")

    relay = relay_with(Recorder("survivor", log), Failing())
    with caplog.at_level(logging.ERROR, logger="think.plugins"):
        await relay.on_step_finish(step_result())
    assert log == ["survivor"]
    [record] = caplog.records
    assert "failing_observer" in record.getMessage()
    assert "on_step_finish" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


async def test_configure_session_failure_raises_plugin_error() -> None:
    opened: list[object] = []

    class Opener:
        name = "opener"

        @hookimpl
        async def configure_session(self, session: object) -> None:
            opened.append(session)

    class Refuser:
        name = "refuser"

        @hookimpl
        def configure_session(self, session: object) -> None:
            raise KeyError("missing state")

    session = object()
    await relay_with(Opener()).configure_session(session)
    assert opened == [session]
    with pytest.raises(PluginError) as info:
        await relay_with(Opener(), Refuser()).configure_session(session)
    assert info.value.plugin_name == "refuser"
    assert info.value.hook == "configure_session"
    assert isinstance(info.value.__cause__, KeyError)


# -- error hooks ----------------------------------------------------------------------------


async def test_on_chat_error_skips_a_raising_impl(caplog: pytest.LogCaptureFixture) -> None:
    class Replacer:
        name = "replacer"

        @hookimpl
        async def on_chat_error(self, error: BaseException) -> str:
            return f"friendly: {error}"

    class Broken:
        name = "broken_handler"

        @hookimpl
        def on_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> None:
            raise RuntimeError("handler bug")

    with caplog.at_level(logging.ERROR, logger="think.plugins"):
        replaced = await relay_with(Replacer(), Broken()).on_chat_error(
            ValueError("boom"), error_ctx()
        )
    assert replaced == "friendly: boom"
    assert any("broken_handler" in r.getMessage() for r in caplog.records)
    assert await relay_with(Broken()).on_chat_error(ValueError("boom"), error_ctx()) is None


async def test_classify_ignores_junk_and_raising_impls(caplog: pytest.LogCaptureFixture) -> None:
    class Junk:
        name = "junk_classifier"

        @hookimpl
        async def classify_chat_error(self, error: BaseException) -> str:
            return "catastrophic"

    class Raising:
        name = "raising_classifier"

        @hookimpl
        def classify_chat_error(self, error: BaseException) -> str:
            raise RuntimeError("classifier bug")

    class Fallback:
        name = "fallback"

        @hookimpl(trylast=True)
        def classify_chat_error(self) -> str:
            return "transient"

    with caplog.at_level(logging.WARNING, logger="think.plugins"):
        assert await relay_with(Junk(), Raising()).classify_chat_error(
            RuntimeError("x"), error_ctx()
        ) is None
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "junk_classifier" in messages and "catastrophic" in messages
    assert "raising_classifier" in messages
    relay = relay_with(Fallback(), Junk(), Raising())
    assert await relay.classify_chat_error(RuntimeError("x"), error_ctx()) == "transient"


# -- on_chunk -------------------------------------------------------------------------------


class ChunkCounter:
    def __init__(self, name: str) -> None:
        self.name = name
        self.texts: list[str] = []

    @hookimpl
    def on_chunk(self, ctx: ChunkContext) -> None:
        self.texts.append(ctx.chunk.text)


async def test_chunk_observers_are_plain_callables_in_pluggy_order() -> None:
    log: list[str] = []

    class NoArgs:
        name = "no_args"

        @hookimpl(tryfirst=True)
        def on_chunk(self) -> None:
            log.append("no_args")

    counter = ChunkCounter("counter")
    relay = relay_with(NoArgs(), counter)
    observers = relay.chunk_observers
    assert isinstance(observers, tuple) and len(observers) == 2
    assert relay.chunk_observers is observers  # cached, not rebuilt per access
    ctx = chunk_ctx("tok")
    for observer in observers:
        observer(ctx)
    assert log == ["no_args"] and counter.texts == ["tok"]
    relay.emit_chunk(chunk_ctx("tok2"))
    assert log == ["no_args", "no_args"] and counter.texts == ["tok", "tok2"]


async def test_no_chunk_observers_is_an_empty_tuple() -> None:
    assert relay_with(Recorder("x", [])).chunk_observers == ()


async def test_chunk_observers_follow_registration_changes() -> None:
    relay = relay_with()
    assert relay.chunk_observers == ()
    counter = ChunkCounter("counter")
    relay._pm.register(counter, name="counter")
    relay.emit_chunk(chunk_ctx("a"))
    assert counter.texts == ["a"] and len(relay.chunk_observers) == 1
    relay._pm.unregister(counter)
    relay.emit_chunk(chunk_ctx("b"))
    assert counter.texts == ["a"] and relay.chunk_observers == ()


async def test_raising_chunk_observer_does_not_break_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Faulty:
        name = "faulty_chunker"

        @hookimpl(tryfirst=True)
        def on_chunk(self, ctx: ChunkContext) -> None:
            raise ZeroDivisionError("bad observer")

    counter = ChunkCounter("counter")
    relay = relay_with(counter, Faulty())
    with caplog.at_level(logging.ERROR, logger="think.plugins"):
        relay.emit_chunk(chunk_ctx("x"))
    assert counter.texts == ["x"]
    [record] = caplog.records
    assert "faulty_chunker" in record.getMessage() and "on_chunk" in record.getMessage()


# -- tracing --------------------------------------------------------------------------------


async def test_trace_logs_each_call(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Slow:
        name = "slow_decider"

        @hookimpl
        async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision:
            await asyncio.sleep(0.02)
            return block("slow")

    class Raising:
        name = "raising_observer"

        @hookimpl
        def after_tool_call(self) -> None:
            raise RuntimeError("x")

    monkeypatch.setenv("THINK_TRACE_PLUGINS", "1")
    relay = relay_with(Slow(), Raising(), ChunkCounter("counter"))
    with caplog.at_level(logging.INFO, logger="think.plugins.trace"):
        await relay.before_tool_call(tool_ctx())
        await relay.after_tool_call(object())  # type: ignore[arg-type]
        relay.emit_chunk(chunk_ctx())
    traces = [
        (r.hook, r.plugin, r.result) for r in caplog.records if r.name == "think.plugins.trace"
    ]
    assert traces == [
        ("before_tool_call", "slow_decider", "ToolCallDecision"),
        ("after_tool_call", "raising_observer", "raised RuntimeError"),
        ("on_chunk", "counter", "None"),
    ]
    slow = next(r for r in caplog.records if getattr(r, "plugin", None) == "slow_decider")
    assert slow.duration_ms >= 15  # the await is included
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "think.plugins.trace")


async def test_tracing_is_decided_when_the_dispatcher_is_built(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    counter = ChunkCounter("counter")
    untraced = relay_with(counter, AllowAll())
    monkeypatch.setenv("THINK_TRACE_PLUGINS", "1")
    traced = relay_with(ChunkCounter("traced_counter"), AllowAll())
    with caplog.at_level(logging.DEBUG, logger="think.plugins.trace"):
        await untraced.before_tool_call(tool_ctx())
        untraced.emit_chunk(chunk_ctx())
        assert caplog.records == []
        await traced.before_tool_call(tool_ctx())
        traced.emit_chunk(chunk_ctx())
    assert [(r.hook, r.plugin) for r in caplog.records] == [
        ("before_tool_call", "allow_all"),
        ("on_chunk", "traced_counter"),
    ]
    assert untraced.chunk_observers == (counter.on_chunk,)


async def test_no_trace_records_when_tracing_is_off(caplog: pytest.LogCaptureFixture) -> None:
    counter = ChunkCounter("counter")
    relay = relay_with(counter, AllowAll())
    assert relay.chunk_observers == (counter.on_chunk,)  # the bound method itself, unwrapped
    with caplog.at_level(logging.DEBUG, logger="think.plugins.trace"):
        await relay.before_tool_call(tool_ctx())
        relay.emit_chunk(chunk_ctx())
    assert caplog.records == []

