"""A turn in its documented order (think_core/hookspecs.py), driven through ``Think`` with a scripted model and real hooks."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

from tests.recorder import Recorder
from tests.support.agents import make_agent
from think_core import (
    NestedTurnError,
    ProviderError,
    StepConfig,
    TurnConfig,
    Usage,
    allow,
    block,
    hookimpl,
    substitute,
    tool,
)
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call


def make_tools(counter: dict[str, int]):
    @tool(read_only=True)
    def add(a: int, b: int) -> int:
        """Add two integers."""
        counter["add"] = counter.get("add", 0) + 1
        counter.setdefault("inputs", []).append((a, b))
        return a + b

    @tool
    async def shout(text: str) -> str:
        """Upper-case some text."""
        counter["shout"] = counter.get("shout", 0) + 1
        return text.upper()

    return add, shout


def agent_with(steps, *plugins, tools=(), **kwargs) -> Think:
    return make_agent(ScriptedModel(steps), tools=tools, plugins=plugins, **kwargs)


async def test_two_tool_steps_fire_every_hook_in_order():
    counter: dict[str, Any] = {}
    add, shout = make_tools(counter)
    rec = Recorder()
    steps = [
        Step(text="Adding.", tool_calls=[call("add", {"a": 1, "b": 2})], usage=Usage(input_tokens=10, output_tokens=3, total_tokens=13)),
        Step(tool_calls=[call("shout", {"text": "three"})], usage=Usage(input_tokens=20, output_tokens=4, total_tokens=24)),
        Step(text="It is THREE.", usage=Usage(input_tokens=30, output_tokens=5, total_tokens=35)),
    ]
    agent = agent_with(steps, rec, tools=[add, shout])
    result = await agent.session("s").chat("1+2, shouted?")

    assert result.status == "completed"
    assert result.text == "Adding.It is THREE."
    assert result.usage == Usage(input_tokens=60, output_tokens=12, total_tokens=72)
    assert rec.names() == [
        "configure_session",
        "before_turn",
        "before_step", "before_tool_call", "after_tool_call", "on_step_finish",
        "before_step", "before_tool_call", "after_tool_call", "on_step_finish",
        "before_step", "on_step_finish",
        "on_chat_response",
    ]
    # StepContext.steps grows by one per step.
    assert [len(c.steps) for c in rec.contexts["before_step"]] == [0, 1, 2]
    assert [c.step_number for c in rec.contexts["on_step_finish"]] == [0, 1, 2]
    # Chunks arrive in stream order, tool results after the tool ran.
    chunk_types = [d for h, d in rec.calls if h == "on_chunk"]
    assert chunk_types[:5] == ["text-delta", "tool-input-start", "tool-input-delta", "tool-call", "tool-result"]
    first_result = rec.calls.index(("on_chunk", "tool-result"))
    assert rec.calls[first_result - 1][0] == "after_tool_call"
    assert counter["add"] == 1 and counter["shout"] == 1
    after = rec.contexts["after_tool_call"]
    assert [(a.output, a.success, a.decision) for a in after] == [(3, True, "allow"), ("THREE", True, "allow")]
    final = rec.contexts["on_chat_response"][0]
    assert final.status == "completed" and final.usage.total_tokens == 72
    assert final.message.id == result.message.id


class Decider:
    name = "decider"

    def __init__(self, decision):
        self.decision = decision

    @hookimpl
    def before_tool_call(self, ctx):
        if isinstance(self.decision, Exception):
            raise self.decision
        return self.decision


@pytest.mark.parametrize(
    ("decision", "runs", "output", "seen_by_model", "success", "kind"),
    [
        pytest.param(None, 1, 5, 5, True, "allow", id="none-allows"),
        pytest.param(allow(), 1, 5, 5, True, "allow", id="allow"),
        pytest.param(allow({"a": 10, "b": 20}), 1, 30, 30, True, "allow", id="allow-rewritten-input"),
        pytest.param(block("read-only mode"), 0, "read-only mode", "read-only mode", True, "block", id="block-reason"),
        pytest.param(block(), 0, 'Tool "add" was blocked by before_tool_call.', 'Tool "add" was blocked by before_tool_call.', True, "block", id="block-default"),
        pytest.param(substitute({"cached": 5}), 0, {"cached": 5}, {"cached": 5}, True, "substitute", id="substitute"),
        pytest.param(RuntimeError("guard crashed"), 0, None, "PluginError: plugin 'decider' failed in before_tool_call: RuntimeError('guard crashed')", False, "allow", id="raises"),
    ],
)
async def test_tool_call_decisions(decision, runs, output, seen_by_model, success, kind):
    counter: dict[str, Any] = {}
    add, _ = make_tools(counter)
    rec = Recorder()
    model = ScriptedModel([Step(tool_calls=[call("add", {"a": 2, "b": 3})]), "done"])
    agent = Think(model, tools=[add], plugins=[rec, Decider(decision)], load_entrypoints=False)
    result = await agent.session("s").chat("go")

    assert result.status == "completed"
    assert counter.get("add", 0) == runs
    after = rec.contexts["after_tool_call"][0]
    assert after.input == {"a": 2, "b": 3}  # always the model's own input
    assert after.success is success
    assert after.decision == kind
    if success:
        assert after.output == output
    else:
        assert "guard crashed" in after.error
    tool_message = model.requests[1].messages[-1]
    assert tool_message.role == "tool" and tool_message.tool_call_id == "call_1"
    assert tool_message.output == seen_by_model
    assert tool_message.is_error is (not success)


async def test_invalid_unknown_and_malformed_tool_calls_become_error_results():
    counter: dict[str, Any] = {}
    add, _ = make_tools(counter)
    rec = Recorder()
    model = ScriptedModel(
        [
            Step(tool_calls=[call("add", {"a": "x", "b": 1}), call("nope", {}), call("add", "{not json")]),
            "sorry",
        ]
    )
    agent = Think(model, tools=[add], plugins=[rec], load_entrypoints=False)
    result = await agent.session("s").chat("go")
    assert result.status == "completed"
    assert counter.get("add", 0) == 0
    results = [m for m in model.requests[1].messages if m.role == "tool"]
    assert all(r.is_error for r in results)
    assert "Invalid input for tool 'add'" in results[0].output and "a:" in results[0].output
    assert "Unknown tool 'nope'" in results[1].output
    assert "expected a JSON object" in results[2].output
    assert [a.success for a in rec.contexts["after_tool_call"]] == [False, False, False]
    parts = [p for p in result.message.parts if p["type"].startswith("tool-")]
    assert [p["state"] for p in parts] == ["output-error"] * 3


async def test_generator_tool_streams_preliminary_results():
    @tool
    async def countdown(n: int):
        """Count down."""
        for i in range(n, 0, -1):
            yield {"left": i}
        yield {"left": 0, "done": True}

    rec = Recorder()
    model = ScriptedModel([Step(tool_calls=[call("countdown", {"n": 2})]), "liftoff"])
    agent = Think(model, tools=[countdown], plugins=[rec], load_entrypoints=False)
    chunks = [c async for c in agent.session("s").stream("go")]
    outputs = [c for c in chunks if c["type"] == "tool-output-available"]
    assert [o.get("preliminary", False) for o in outputs] == [True, True, True, False]
    assert outputs[-1]["output"] == {"left": 0, "done": True}
    tool_chunks = [c.chunk for c in rec.contexts["on_chunk"] if c.chunk.type == "tool-result"]
    assert [c.preliminary for c in tool_chunks] == [True, True, True, False]
    assert model.requests[1].messages[-1].output == {"left": 0, "done": True}


async def test_stream_yields_ai_sdk_ui_chunks():
    counter: dict[str, Any] = {}
    add, _ = make_tools(counter)
    model = ScriptedModel([Step(reasoning="thinking", text="Hi.", tool_calls=[call("add", {"a": 1, "b": 1})]), "Two."])
    agent = Think(model, tools=[add], load_entrypoints=False)
    chunks = [c async for c in agent.session("s").stream("hello")]
    kinds = [c["type"] for c in chunks]
    assert kinds == [
        "start", "start-step",
        "reasoning-start", "reasoning-delta", "reasoning-end",
        "text-start", "text-delta", "text-end",
        "tool-input-start", "tool-input-delta", "tool-input-available", "tool-output-available",
        "finish-step",
        "start-step", "text-start", "text-delta", "text-end", "finish-step",
        "finish",
    ]
    assert chunks[0]["messageId"]
    available = chunks[kinds.index("tool-input-available")]
    assert available["input"] == {"a": 1, "b": 1} and available["toolName"] == "add"
    assert chunks[kinds.index("tool-output-available")]["output"] == 2


async def test_send_reasoning_false_hides_reasoning_chunks_but_keeps_the_part():
    model = ScriptedModel([Step(reasoning="secret plan", text="ok")])
    agent = Think(model, load_entrypoints=False, send_reasoning=False)
    chunks = [c async for c in agent.session("s").stream("hello")]
    assert not [c for c in chunks if c["type"].startswith("reasoning")]
    stored = (await agent.session("s").history())[-1]  # the stored message, as the model sees it
    assert any(p["type"] == "reasoning" and p["text"] == "secret plan" for p in stored.parts)
    served = (await agent.session("s").messages())[-1]  # what clients are served: no reasoning
    assert served.id == stored.id and not [p for p in served.parts if p["type"] == "reasoning"]


async def test_before_turn_config_is_applied():
    counter: dict[str, Any] = {}
    add, shout = make_tools(counter)

    @tool
    def extra() -> str:
        """An extra tool."""
        return "extra!"

    other_model = ScriptedModel([Step(tool_calls=[call("extra")]), Step(tool_calls=[call("add", {"a": 1, "b": 1})]), "never"])

    class Configurer:
        name = "configurer"

        @hookimpl
        def before_turn(self, ctx):
            assert ctx.tools.keys() == {"add", "shout"}
            return TurnConfig(
                model=other_model,
                system="You are terse.",
                tools=[extra],
                active_tools=["extra", "add"],
                tool_choice="required",
                max_steps=2,
                temperature=0.2,
                max_output_tokens=50,
                seed=7,
            )

    default_model = ScriptedModel(["unused"])
    agent = Think(default_model, tools=[add, shout], plugins=[Configurer()], load_entrypoints=False)
    result = await agent.session("s").chat("go")
    assert default_model.requests == []
    assert len(other_model.requests) == 2  # max_steps=2 stops before the third step
    first = other_model.requests[0]
    assert first.system == "You are terse."
    assert sorted(t.name for t in first.tools) == ["add", "extra"]
    assert first.tool_choice == "required"
    assert (first.settings.temperature, first.settings.max_output_tokens, first.settings.seed) == (0.2, 50, 7)
    assert result.status == "completed"
    assert counter["add"] == 1


async def test_before_turn_messages_replace_history_and_before_step_overrides():
    class Override:
        name = "override"

        @hookimpl
        def before_turn(self, ctx):
            from think_core.models import UserMessage

            return TurnConfig(messages=[UserMessage(content="replaced")])

        @hookimpl
        async def before_step(self, ctx):
            await asyncio.sleep(0)
            return StepConfig(system=f"step {ctx.step_number}")

    model = ScriptedModel(["ok"])
    agent = Think(model, plugins=[Override()], load_entrypoints=False)
    await agent.session("s").chat("original")
    request = model.requests[0]
    assert [m.content for m in request.messages] == ["replaced"]
    assert request.system == "step 0"


async def test_structured_output_is_validated_and_returned():
    class Weather(BaseModel):
        city: str
        temperature_c: float

    class AskForOutput:
        name = "ask"

        @hookimpl
        def before_turn(self, ctx):
            return TurnConfig(output=Weather)

    rec = Recorder()
    model = ScriptedModel([json.dumps({"city": "Oslo", "temperature_c": -3.5})])
    agent = Think(model, plugins=[AskForOutput(), rec], load_entrypoints=False)
    result = await agent.session("s").chat("weather?")
    assert result.output == Weather(city="Oslo", temperature_c=-3.5)
    assert rec.contexts["on_chat_response"][0].output == result.output
    assert model.requests[0].output.json_schema["properties"].keys() == {"city", "temperature_c"}

    bad = Think(ScriptedModel(["not json"]), plugins=[AskForOutput()], load_entrypoints=False)
    failed = await bad.session("s").chat("weather?")
    assert failed.status == "error" and "structured output did not validate" in failed.error


async def test_persistence_survives_a_new_agent_over_the_same_file(tmp_path):
    db = tmp_path / "think.db"
    first = Think(ScriptedModel(["Hello there."]), store=str(db), load_entrypoints=False)
    await first.session("conv").chat("hi")
    first.close()

    second = Think(ScriptedModel(["Again."]), store=str(db), load_entrypoints=False)
    history = await second.session("conv").messages()
    assert [(m.role, m.text) for m in history] == [("user", "hi"), ("assistant", "Hello there.")]
    model = second.model
    await second.session("conv").chat("more")
    assert [m.role for m in model.requests[0].messages] == ["user", "assistant", "user"]
    second.close()


async def test_error_mid_stream_keeps_the_partial_text_and_reports_the_error(tmp_path):
    error = ProviderError("upstream exploded", status=500)
    rec = Recorder()

    class Replace:
        name = "replace"

        @hookimpl
        def on_chat_error(self, error, ctx):
            return f"friendly: {error.message}"

    model = ScriptedModel([Step(text="Partial answer", error=error, error_after_output=True)])
    agent = Think(model, plugins=[Replace(), rec], store=str(tmp_path / "db.sqlite"), load_entrypoints=False)
    result = await agent.session("s").chat("go")
    assert result.status == "error"
    assert result.error == "friendly: upstream exploded"
    stored = (await agent.session("s").messages())[-1]
    assert stored.role == "assistant" and stored.text == "Partial answer"
    assert rec.names()[-3:] == ["classify_chat_error", "on_chat_error", "on_chat_response"]
    assert rec.names().count("classify_chat_error") == 1  # consulted once per failure
    assert rec.contexts["on_chat_error"][0].stage == "stream"
    assert rec.contexts["on_chat_response"][0].status == "error"
    agent.close()


async def test_in_stream_error_event_and_before_turn_failure():
    rec = Recorder()
    model = ScriptedModel([Step(text="so far", error=ProviderError("overloaded", status=529), error_after_output=True, error_as_event=True)])
    agent = Think(model, plugins=[rec], load_entrypoints=False)
    result = await agent.session("s").chat("go")
    assert result.status == "error" and "overloaded" in result.error
    assert result.message.text == "so far"

    class Broken:
        name = "broken"

        @hookimpl
        async def before_turn(self, ctx):
            raise ValueError("policy service down")

    rec2 = Recorder()
    agent2 = Think(ScriptedModel(["never"]), plugins=[Broken(), rec2], load_entrypoints=False)
    failed = await agent2.session("s").chat("go")
    assert failed.status == "error" and "policy service down" in failed.error
    assert rec2.contexts["on_chat_error"][0].stage == "turn"
    assert agent2.model.requests == []
    chunks = [c async for c in agent2.session("t").stream("go")]
    assert chunks[-1] == {
        "type": "error", "errorText": "plugin 'broken' failed in before_turn: ValueError('policy service down')"
    }


async def test_observer_failures_do_not_break_the_turn(caplog):
    class Noisy:
        name = "noisy"

        @hookimpl
        def on_chunk(self, ctx):
            raise RuntimeError("chunk observer bug")

        @hookimpl
        async def after_tool_call(self, ctx):
            raise RuntimeError("after bug")

        @hookimpl
        def on_chat_response(self, result):
            raise RuntimeError("response bug")

    counter: dict[str, Any] = {}
    add, _ = make_tools(counter)
    agent = Think(ScriptedModel([Step(text="a", tool_calls=[call("add", {"a": 1, "b": 1})]), "b"]), tools=[add], plugins=[Noisy()], load_entrypoints=False)
    result = await agent.session("s").chat("go")
    assert result.status == "completed" and result.text == "ab"
    assert "noisy" in caplog.text


async def test_configure_session_fires_once_per_session():
    rec = Recorder()
    agent = Think(ScriptedModel(["a", "b", "c"]), plugins=[rec], load_entrypoints=False)
    await agent.session("one").chat("x")
    await agent.session("one").chat("y")
    await agent.session("two").chat("z")
    assert [d for h, d in rec.calls if h == "configure_session"] == ["one", "two"]


async def test_concurrent_chats_serialize_per_session_and_overlap_across_sessions():
    active: dict[str, int] = {"now": 0, "max": 0}

    @tool
    async def slow() -> str:
        """Sleep a little."""
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        await asyncio.sleep(0.05)
        active["now"] -= 1
        return "slept"

    def script():
        # Reacts to the request, so sessions sharing the model each get a tool step, then text.
        def step(request):
            return "done" if request.messages[-1].role == "tool" else Step(tool_calls=[call("slow")])

        return ScriptedModel([step], repeat=True)

    same = Think(script(), tools=[slow], load_entrypoints=False)
    session = same.session("s")
    results = await asyncio.gather(session.chat("one"), session.chat("two"))
    assert [r.status for r in results] == ["completed", "completed"]
    assert active["max"] == 1
    roles = [m.role for m in await session.messages()]
    assert roles == ["user", "assistant", "user", "assistant"]

    active.update(now=0, max=0)
    both = Think(script(), tools=[slow], load_entrypoints=False)
    await asyncio.gather(both.session("a").chat("one"), both.session("b").chat("two"))
    assert active["max"] == 2


async def test_cancel_aborts_and_persists_the_partial():
    rec = Recorder()
    model = ScriptedModel([Step(text=" ".join(["word"] * 200))], delay=0.01)
    agent = Think(model, plugins=[rec], load_entrypoints=False)
    session = agent.session("s")
    task = asyncio.create_task(session.chat("long answer please", request_id="r1"))
    # Cancel only once a few words streamed: a fixed sleep races the scheduler on a busy host.
    deadline = asyncio.get_running_loop().time() + 30
    while sum(1 for h, kind in rec.calls if h == "on_chunk" and kind == "text-delta") < 4:
        assert asyncio.get_running_loop().time() < deadline, "no text streamed"
        await asyncio.sleep(0.005)
    assert session.cancel("r1") is True
    result = await asyncio.wait_for(task, 2)
    assert result.status == "aborted"
    stored = (await session.messages())[-1]
    assert stored.role == "assistant" and stored.text.startswith("word word")
    assert rec.contexts["on_chat_response"][0].status == "aborted"


async def test_nested_blocking_call_from_a_tool_raises_instead_of_hanging():
    captured: dict[str, Any] = {}

    @tool
    async def recurse() -> str:
        """Call back into the same session."""
        try:
            await agent.session("s").chat("inner")
        except NestedTurnError as exc:
            captured["error"] = exc
            return "refused"
        return "ran"

    agent = Think(ScriptedModel([Step(tool_calls=[call("recurse")]), "ok"]), tools=[recurse], load_entrypoints=False)
    result = await asyncio.wait_for(agent.session("s").chat("go"), 5)
    assert result.status == "completed"
    assert "submit_messages" in str(captured["error"])


async def test_a_queued_turn_can_be_cancelled_and_outside_cancellation_propagates():
    model = ScriptedModel([Step(text=" ".join(["tick"] * 30))], delay=0.01, repeat=True)
    agent = Think(model, load_entrypoints=False)
    session = agent.session("s")
    first = asyncio.create_task(session.chat("one", request_id="r1"))
    queued = asyncio.create_task(session.chat("two", request_id="r2"))
    await asyncio.sleep(0.05)
    assert session.cancel("r2") is True
    assert (await asyncio.wait_for(queued, 2)).status == "aborted"
    assert (await first).status == "completed"
    assert len(model.requests) == 1  # the queued turn never reached the model

    outer = asyncio.create_task(session.chat("three"))
    await asyncio.sleep(0.05)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    stored = await session.messages()
    assert stored[-1].role == "assistant" and stored[-1].text.startswith("tick")  # partial kept
    assert session.active_request_ids == []


async def test_agent_aclose_closes_plugins_and_a_failing_close_is_isolated(caplog):
    closed: list[str] = []

    class Holder:
        name = "holder"

        @hookimpl
        def on_chat_response(self, result):
            pass

        async def aclose(self):
            closed.append("holder")

    class Broken:
        name = "broken_close"

        @hookimpl
        def on_chat_response(self, result):
            pass

        def close(self):
            raise RuntimeError("close failed")

    agent = Think(ScriptedModel(["hi"]), plugins=[Holder(), Broken()], load_entrypoints=False)
    await agent.session("s").chat("x")
    await agent.aclose()
    assert closed == ["holder"]
    assert "broken_close" in caplog.text


async def test_a_blocking_sync_tool_does_not_stall_other_sessions():
    import threading

    release = threading.Event()

    @tool
    def wait_for_release() -> str:
        """Blocks its thread until released, like slow file or network I/O."""
        if not release.wait(5):
            return "never released"
        return "released"

    def steps(request):
        if request.messages[-1].role == "tool":
            return f"tool said {request.messages[-1].output}"
        text = request.messages[-1].content
        return Step(tool_calls=[call("wait_for_release")]) if text == "block" else "quick answer"

    agent = Think(ScriptedModel([steps], repeat=True), tools=[wait_for_release], load_entrypoints=False)
    blocked = asyncio.create_task(agent.session("a").chat("block"))
    await asyncio.sleep(0.05)
    # Had the tool run on the event loop, this turn could not finish until the tool returned.
    quick = await asyncio.wait_for(agent.session("b").chat("hello"), 2)
    assert quick.text == "quick answer" and not blocked.done()
    release.set()
    assert (await blocked).text == "tool said released"


async def test_tools_with_postponed_annotations_and_model_arguments():
    from tests.engine._postponed_tools import distance

    assert distance.parameters["required"] == ["a"]
    model = ScriptedModel([Step(tool_calls=[call("distance", {"a": {"x": 3, "y": 4}})]), "5"])
    agent = Think(model, tools=[distance], load_entrypoints=False)
    await agent.session("s").chat("how far?")
    assert model.requests[1].messages[-1].output == 5.0


async def test_idle_sessions_are_not_kept_forever_but_a_session_in_use_is_never_duplicated():
    import gc

    agent = Think(ScriptedModel(["ok"], repeat=True), load_entrypoints=False, max_idle_sessions=2)
    held = agent.session("held")  # referenced here, as a server connection would
    for i in range(5):
        await agent.session(f"s{i}").chat("hi")
    gc.collect()
    assert set(agent.sessions) <= {"held", "s3", "s4"}
    assert "held" in agent.sessions and agent.session("held") is held
    assert [m.text for m in await agent.session("s0").messages()] == ["hi", "ok"]  # reopened from the store


async def test_the_agent_is_an_async_context_manager(tmp_path):
    async with Think(ScriptedModel(["hi"]), store=str(tmp_path / "a.db"), load_entrypoints=False) as agent:
        assert (await agent.session("s").chat("x")).text == "hi"
    with pytest.raises(RuntimeError, match="closed"):
        await agent.session("s").messages()


def test_scripted_steps_accept_tool_call_events_and_refuse_anything_else():
    from think_core import ToolCall

    step = Step(tool_calls=[ToolCall("c1", "add", {"a": 1, "b": 2})])
    assert (step.tool_calls[0].name, step.tool_calls[0].input, step.tool_calls[0].id) == ("add", {"a": 1, "b": 2}, "c1")
    with pytest.raises(TypeError, match="call\\(name, input\\)"):
        Step(tool_calls=[{"name": "add"}])
