"""The OpenTelemetry plugin: the span tree of a turn, exported to the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import think_plugins.otel as otel_module
from think_core import ConfigurationError, ProviderError, Think, ToolCallContext, Usage, block, hookimpl, tool
from think_core.models.scripted import ScriptedModel, Step, call
from think_plugins.otel import OTelSettings, OTelTracing
from think_plugins.overflow import OverflowClassifier

OVERLOADED = ProviderError("Overloaded", status=529, type="overloaded_error")  # classified transient
BAD_REQUEST = ProviderError("Invalid model", status=400, type="invalid_request_error")  # classified fatal
CONTENT_KEYS = {
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "otel" / "trace_a_turn.py"


Traced = tuple[TracerProvider, InMemorySpanExporter]


@pytest.fixture
def traced() -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def traced_agent(model: ScriptedModel, plugin: OTelTracing, tools: list[Any] = (), **kwargs: Any) -> Think:
    kwargs.setdefault("retry", {"base_delay": 0.01})
    return Think(model, tools=list(tools), plugins=[OverflowClassifier(), plugin], **kwargs)


def meeting_tools() -> list[Any]:
    """Two tools that each wait until the other has started: they only finish when run concurrently."""
    started = {"lookup": asyncio.Event(), "convert": asyncio.Event()}

    @tool
    async def lookup(city: str) -> str:
        """Look up a city."""
        started["lookup"].set()
        await asyncio.wait_for(started["convert"].wait(), 5)
        return f"{city}: 21C"

    @tool
    async def convert(celsius: int) -> float:
        """Convert to Fahrenheit."""
        started["convert"].set()
        await asyncio.wait_for(started["lookup"].wait(), 5)
        return celsius * 9 / 5 + 32

    return [lookup, convert]


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time or 0)


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def two_tools_after_a_retry() -> ScriptedModel:
    return ScriptedModel(
        [
            Step(error=OVERLOADED),
            Step(
                tool_calls=[call("lookup", {"city": "Oslo"}), call("convert", {"celsius": 21})],
                usage=Usage(input_tokens=100, output_tokens=20, total_tokens=120),
            ),
            Step(text="Oslo is 21C (69.8F).", usage=Usage(input_tokens=150, output_tokens=10, total_tokens=160)),
        ]
    )


async def test_span_tree_of_a_turn_with_two_parallel_tool_calls_and_a_retried_step(traced: Traced) -> None:
    provider, exporter = traced
    plugin = OTelTracing(tracer_provider=provider)
    agent = traced_agent(two_tools_after_a_retry(), plugin, meeting_tools())
    result = await agent.session("s1").chat("Weather in Oslo, in Fahrenheit?")
    assert result.status == "completed" and result.text == "Oslo is 21C (69.8F)."

    spans = exporter.get_finished_spans()
    [turn] = by_name(spans, "invoke_agent think")
    failed, retried, answer = by_name(spans, "chat scripted")
    [lookup] = by_name(spans, "execute_tool lookup")
    [convert] = by_name(spans, "execute_tool convert")
    assert len(spans) == 6 and plugin.open_turns == 0

    # the tree: everything under the turn, which is a root (no application span around it)
    assert turn.parent is None
    assert {parent_id(s) for s in (failed, retried, answer, lookup, convert)} == {turn.context.span_id}
    assert len({s.context.trace_id for s in spans}) == 1

    # the retried step: the failed attempt ends in error with its exception, the retry follows it
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "think_core.errors.ProviderError"
    assert [e.name for e in failed.events] == ["exception"]
    assert failed.events[0].attributes["exception.message"] == str(OVERLOADED)
    assert failed.attributes["think.step.number"] == 0 and "think.step.attempt" not in failed.attributes
    assert retried.attributes["think.step.number"] == 0 and retried.attributes["think.step.attempt"] == 2
    assert retried.status.status_code is StatusCode.UNSET
    assert retried.start_time == failed.end_time
    [retry_event] = [e for e in turn.events if e.name == "think.step.retry"]
    assert dict(retry_event.attributes) == {
        "think.step.number": 0, "think.step.attempt": 2, "error.type": "think_core.errors.ProviderError",
    }
    assert answer.attributes["think.step.number"] == 1

    # the model call ends before its tool calls start; the two calls overlap (they ran concurrently)
    assert retried.end_time <= min(lookup.start_time, convert.start_time)
    assert lookup.start_time < convert.end_time and convert.start_time < lookup.end_time
    assert answer.start_time >= max(lookup.end_time, convert.end_time)


async def test_attributes_follow_the_genai_conventions(traced: Traced) -> None:
    provider, exporter = traced
    agent = traced_agent(two_tools_after_a_retry(), OTelTracing(tracer_provider=provider), meeting_tools())
    await agent.session("s1").chat("Weather in Oslo, in Fahrenheit?", request_id="req-1")
    spans = exporter.get_finished_spans()
    [turn] = by_name(spans, "invoke_agent think")
    _, retried, answer = by_name(spans, "chat scripted")
    [lookup] = by_name(spans, "execute_tool lookup")

    assert {k: turn.attributes[k] for k in (
        "gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.conversation.id", "gen_ai.request.model",
        "gen_ai.provider.name", "think.request_id", "think.trigger", "think.turn.status",
        "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
    )} == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "think", "gen_ai.conversation.id": "s1",
        "gen_ai.request.model": "scripted", "gen_ai.provider.name": "scripted", "think.request_id": "req-1",
        "think.trigger": "chat", "think.turn.status": "completed",
        "gen_ai.usage.input_tokens": 250, "gen_ai.usage.output_tokens": 30,
    }
    assert turn.status.status_code is StatusCode.UNSET
    assert {k: retried.attributes[k] for k in (
        "gen_ai.operation.name", "gen_ai.request.model", "gen_ai.response.model", "gen_ai.provider.name",
        "gen_ai.conversation.id", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
        "gen_ai.response.finish_reasons", "gen_ai.response.id",
    )} == {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted", "gen_ai.response.model": "scripted",
        "gen_ai.provider.name": "scripted", "gen_ai.conversation.id": "s1",
        "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 20,
        "gen_ai.response.finish_reasons": ("tool-calls",), "gen_ai.response.id": "scripted-2",
    }
    assert answer.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert {k: lookup.attributes[k] for k in (
        "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.type",
        "gen_ai.tool.description", "gen_ai.conversation.id", "think.step.number", "think.tool.decision",
    )} == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function", "gen_ai.tool.description": "Look up a city.",
        "gen_ai.conversation.id": "s1", "think.step.number": 0, "think.tool.decision": "allow",
    }
    assert not CONTENT_KEYS & {key for span in spans for key in span.attributes}  # content is opt-in


async def test_content_is_recorded_only_when_enabled(traced: Traced) -> None:
    provider, exporter = traced
    plugin = OTelTracing({"capture_content": True}, tracer_provider=provider)
    agent = traced_agent(two_tools_after_a_retry(), plugin, meeting_tools(), system="You are terse.")
    await agent.session("s1").chat("Weather in Oslo, in Fahrenheit?")
    spans = exporter.get_finished_spans()
    [turn] = by_name(spans, "invoke_agent think")
    _, retried, answer = by_name(spans, "chat scripted")
    [lookup] = by_name(spans, "execute_tool lookup")
    [convert] = by_name(spans, "execute_tool convert")

    assert json.loads(turn.attributes["gen_ai.system_instructions"]) == [{"type": "text", "content": "You are terse."}]
    assert json.loads(turn.attributes["gen_ai.output.messages"])[0]["parts"] == [
        {"type": "text", "content": "Oslo is 21C (69.8F)."}
    ]
    assert json.loads(retried.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo, in Fahrenheit?"}]}
    ]
    assert json.loads(retried.attributes["gen_ai.output.messages"]) == [{
        "role": "assistant", "finish_reason": "tool-calls", "parts": [
            {"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": {"city": "Oslo"}},
            {"type": "tool_call", "id": "call_2", "name": "convert", "arguments": {"celsius": 21}},
        ],
    }]
    roles = [m["role"] for m in json.loads(answer.attributes["gen_ai.input.messages"])]
    assert roles == ["user", "assistant", "tool", "tool"]
    assert json.loads(lookup.attributes["gen_ai.tool.call.arguments"]) == {"city": "Oslo"}
    assert json.loads(lookup.attributes["gen_ai.tool.call.result"]) == "Oslo: 21C"
    assert json.loads(convert.attributes["gen_ai.tool.call.result"]) == 69.8


async def test_content_is_cut_to_max_content_chars(traced: Traced) -> None:
    provider, exporter = traced
    plugin = OTelTracing({"capture_content": True, "max_content_chars": 40}, tracer_provider=provider)
    await traced_agent(ScriptedModel(["x" * 500]), plugin).session("s").chat("y" * 500)
    [chat] = by_name(exporter.get_finished_spans(), "chat scripted")
    assert len(chat.attributes["gen_ai.input.messages"]) == 40
    assert len(chat.attributes["gen_ai.output.messages"]) == 40


async def test_failing_turn_ends_every_span_in_error_with_the_classification(traced: Traced) -> None:
    provider, exporter = traced
    plugin = OTelTracing(tracer_provider=provider)

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    model = ScriptedModel([Step(tool_calls=[call("ping")]), Step(error=BAD_REQUEST)])
    result = await traced_agent(model, plugin, [ping]).session("s").chat("go")
    assert result.status == "error"

    spans = exporter.get_finished_spans()
    [turn] = by_name(spans, "invoke_agent think")
    first, second = by_name(spans, "chat scripted")
    [ping_span] = by_name(spans, "execute_tool ping")
    assert plugin.open_turns == 0
    assert turn.status.status_code is StatusCode.ERROR and "Invalid model" in turn.status.description
    assert turn.attributes["error.type"] == "fatal"
    assert turn.attributes["think.turn.status"] == "error" and turn.attributes["think.error.stage"] == "stream"
    assert second.status.status_code is StatusCode.ERROR and second.attributes["error.type"] == "fatal"
    assert [e.name for e in second.events] == ["exception"]
    assert first.status.status_code is StatusCode.UNSET and ping_span.status.status_code is StatusCode.UNSET
    assert not any(e.name == "think.step.retry" for e in turn.events)  # a fatal error is not retried


async def test_retries_exhausted_show_every_attempt(traced: Traced) -> None:
    provider, exporter = traced
    model = ScriptedModel([Step(error=OVERLOADED)] * 3)
    result = await traced_agent(model, OTelTracing(tracer_provider=provider), retry={"max_retries": 2, "base_delay": 0.01}
                              ).session("s").chat("go")
    assert result.status == "error"
    spans = exporter.get_finished_spans()
    [turn] = by_name(spans, "invoke_agent think")
    attempts = by_name(spans, "chat scripted")
    assert [a.attributes.get("think.step.attempt", 1) for a in attempts] == [1, 2, 3]
    assert all(a.status.status_code is StatusCode.ERROR for a in attempts)
    assert [a.attributes["error.type"] for a in attempts] == [
        "think_core.errors.ProviderError", "think_core.errors.ProviderError", "transient",
    ]
    assert [e.attributes["think.step.attempt"] for e in turn.events if e.name == "think.step.retry"] == [2, 3]
    assert turn.attributes["error.type"] == "transient"


class BlockDeploy:
    """Decides before the otel plugin sees the call (tryfirst, registered later), hiding it."""

    name = "block_deploy"

    @hookimpl(tryfirst=True)
    def before_tool_call(self, ctx: ToolCallContext) -> Any:
        return block("not today") if ctx.tool_name == "deploy" else None


async def test_failing_invalid_unknown_and_blocked_tool_calls(traced: Traced) -> None:
    provider, exporter = traced

    @tool
    def explode() -> str:
        """Fails."""
        raise RuntimeError("boom")

    @tool
    def deploy() -> str:
        """Deploys."""
        return "deployed"

    calls = [call("explode"), call("missing"), call("explode", "not json"), call("deploy")]
    model = ScriptedModel([Step(tool_calls=calls), "ok"])
    agent = Think(model, tools=[explode, deploy], plugins=[OTelTracing(tracer_provider=provider), BlockDeploy()])
    await agent.session("s").chat("go")
    spans = exporter.get_finished_spans()
    raised, invalid = sorted(by_name(spans, "execute_tool explode"), key=lambda s: s.attributes["gen_ai.tool.call.id"])
    [missing] = by_name(spans, "execute_tool missing")
    [blocked] = by_name(spans, "execute_tool deploy")
    assert raised.attributes["error.type"] == "RuntimeError" and raised.status.description == "RuntimeError: boom"
    assert missing.attributes["error.type"] == "tool_error" and "Unknown tool" in missing.status.description
    assert invalid.attributes["error.type"] == "tool_error" and "expected a JSON object" in invalid.status.description
    assert blocked.attributes["think.tool.decision"] == "block" and blocked.status.status_code is StatusCode.UNSET
    assert blocked.attributes["gen_ai.tool.call.id"] == "call_4"
    [turn] = by_name(spans, "invoke_agent think")
    assert {parent_id(s) for s in (raised, invalid, missing, blocked)} == {turn.context.span_id}
    assert turn.status.status_code is StatusCode.UNSET  # a failing tool does not fail the turn


async def test_aborted_turn_ends_its_open_tool_span(traced: Traced) -> None:
    provider, exporter = traced
    plugin = OTelTracing(tracer_provider=provider)
    running = asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Never returns."""
        running.set()
        await asyncio.sleep(60)
        return "late"

    agent = traced_agent(ScriptedModel([Step(tool_calls=[call("wait_forever")])]), plugin, [wait_forever])
    session = agent.session("s")
    task = asyncio.create_task(session.chat("go", request_id="r1"))
    await asyncio.wait_for(running.wait(), 5)
    assert session.cancel("r1")
    assert (await asyncio.wait_for(task, 5)).status == "aborted"

    spans = exporter.get_finished_spans()
    [turn] = by_name(spans, "invoke_agent think")
    [tool_span] = by_name(spans, "execute_tool wait_forever")
    [chat] = by_name(spans, "chat scripted")
    assert plugin.open_turns == 0
    assert turn.attributes["error.type"] == "aborted" and turn.status.status_code is StatusCode.ERROR
    assert tool_span.attributes["error.type"] == "aborted" and tool_span.status.status_code is StatusCode.ERROR
    assert chat.status.status_code is StatusCode.UNSET  # the model call itself had ended
    assert chat.end_time <= tool_span.start_time


async def test_turn_aborted_during_the_model_call_ends_its_chat_span_in_error(traced: Traced) -> None:
    provider, exporter = traced
    plugin = OTelTracing(tracer_provider=provider)
    model = ScriptedModel([Step(text=" ".join(["word"] * 200))], delay=0.01)
    session = traced_agent(model, plugin).session("s")
    task = asyncio.create_task(session.chat("long answer please", request_id="r1"))
    await asyncio.sleep(0.1)
    assert session.cancel("r1")
    assert (await asyncio.wait_for(task, 5)).status == "aborted"
    spans = exporter.get_finished_spans()
    [turn] = by_name(spans, "invoke_agent think")
    [chat] = by_name(spans, "chat scripted")
    assert plugin.open_turns == 0 and parent_id(chat) == turn.context.span_id
    assert chat.attributes["error.type"] == "aborted" and chat.status.status_code is StatusCode.ERROR
    assert turn.attributes["think.turn.status"] == "aborted"


async def test_concurrent_sessions_keep_separate_trees(traced: Traced) -> None:
    provider, exporter = traced
    both_running = asyncio.Barrier(2)

    @tool
    async def meet(who: str) -> str:
        """Wait for the other session's call."""
        await asyncio.wait_for(both_running.wait(), 5)
        return who

    def script(who: str) -> ScriptedModel:
        return ScriptedModel([Step(tool_calls=[call("meet", {"who": who})]), f"done {who}"])

    plugin = OTelTracing(tracer_provider=provider)
    agent_a = traced_agent(script("a"), plugin, [meet])
    agent_b = traced_agent(script("b"), plugin, [meet])
    await asyncio.gather(agent_a.session("a").chat("go"), agent_b.session("b").chat("go"))

    spans = exporter.get_finished_spans()
    turns = {s.attributes["gen_ai.conversation.id"]: s for s in by_name(spans, "invoke_agent think")}
    assert set(turns) == {"a", "b"} and turns["a"].context.trace_id != turns["b"].context.trace_id
    for span in spans:
        if span.parent is None:
            continue
        session_id = span.attributes["gen_ai.conversation.id"]
        owner = turns[session_id]
        assert parent_id(span) == owner.context.span_id and span.context.trace_id == owner.context.trace_id
    meets = by_name(spans, "execute_tool meet")
    assert sorted(m.attributes["gen_ai.conversation.id"] for m in meets) == ["a", "b"]
    assert meets[0].end_time > meets[1].start_time  # they overlapped


async def test_turn_nests_under_the_callers_current_span(traced: Traced) -> None:
    provider, exporter = traced
    agent = traced_agent(ScriptedModel(["hi"]), OTelTracing(tracer_provider=provider))
    with provider.get_tracer("app").start_as_current_span("handle request") as outer:
        await agent.session("s").chat("hello")
    [turn] = by_name(exporter.get_finished_spans(), "invoke_agent think")
    assert parent_id(turn) == outer.get_span_context().span_id


async def test_overflow_recovery_keeps_one_turn_span(traced: Traced) -> None:
    provider, exporter = traced
    overflow = ProviderError(
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
        status=400, code="context_length_exceeded", type="invalid_request_error",
    )
    model = ScriptedModel([Step(error=overflow), "Fits now."])
    agent = traced_agent(
        model, OTelTracing(tracer_provider=provider), context_overflow={"reactive": True},
        compaction={"tail_tokens": 50}, summarizer=lambda messages, budget: "earlier talk",
    )
    session = agent.session("s")
    for i in range(4):
        await session.add_messages([
            {"role": "user", "parts": [{"type": "text", "text": f"question {i} " + "lorem " * 40}]},
            {"role": "assistant", "parts": [{"type": "text", "text": f"answer {i} " + "ipsum " * 40}]},
        ])
    assert (await session.chat("final")).status == "completed"
    spans = exporter.get_finished_spans()
    [turn] = by_name(spans, "invoke_agent think")
    overflowed, fits = by_name(spans, "chat scripted")
    assert overflowed.attributes["error.type"] == "context_overflow"
    assert fits.status.status_code is StatusCode.UNSET
    assert [e.name for e in turn.events] == ["think.turn.recovery"]
    assert turn.status.status_code is StatusCode.UNSET


async def test_without_an_sdk_nothing_is_recorded_and_turns_run() -> None:
    plugin = OTelTracing()  # the global provider: a no-op until the application configures an SDK
    agent = traced_agent(two_tools_after_a_retry(), plugin, meeting_tools())
    result = await agent.session("s").chat("go")
    assert result.status == "completed" and plugin.open_turns == 0


async def test_without_opentelemetry_installed_the_plugin_is_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otel_module, "trace", None)  # as if the optional extra were missing
    plugin = OTelTracing()
    agent = traced_agent(two_tools_after_a_retry(), plugin, meeting_tools())
    assert (await agent.session("s").chat("go")).status == "completed"
    assert plugin.open_turns == 0


def test_settings_are_validated() -> None:
    assert OTelTracing().settings == OTelSettings()
    with pytest.raises(ConfigurationError, match="'otel'.*capture_content"):
        Think(ScriptedModel([]), plugins=[OTelTracing()], settings={"otel": {"capture_content": "perhaps"}})
    with pytest.raises(ConfigurationError, match="'otel'.*max_content_chars"):
        Think(ScriptedModel([]), plugins=[OTelTracing()], settings={"otel": {"max_content_chars": 0}})


async def test_discovered_through_the_real_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("THINK_PLUGINS")
    agent = Think(ScriptedModel(["hi"]), settings={"otel": {"capture_content": True, "agent_name": "helper"}})
    infos = {info.name: info for info in agent.plugin_manager.plugin_infos}
    otel = infos["otel"]
    assert (otel.status, otel.distribution, otel.value) == ("loaded", "think-agent", "think_plugins.otel:OTelTracing")
    assert set(otel.hooks) == {
        "before_turn", "before_step", "classify_chat_error", "before_tool_call", "after_tool_call",
        "on_step_finish", "on_chat_error", "on_chat_response",
    }
    plugin = agent.plugin_manager.get_plugin("otel")
    assert isinstance(plugin, OTelTracing)
    assert plugin.settings == OTelSettings(capture_content=True, agent_name="helper")
    assert (await agent.session("s").chat("hello")).status == "completed"


def console_spans(stdout: str) -> tuple[list[dict[str, Any]], str]:
    """The JSON objects the console exporter printed, and the text after them."""
    decoder, spans, position = json.JSONDecoder(), [], 0
    while stdout[position:].lstrip().startswith("{"):
        span, position = decoder.raw_decode(stdout, len(stdout) - len(stdout[position:].lstrip()))
        spans.append(span)
    return spans, stdout[position:].strip()


def test_the_example_prints_the_span_tree_with_the_console_exporter(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("THINK_PLUGINS", "THINK_DISABLE_PLUGINS")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert done.returncode == 0, done.stderr
    spans, answer = console_spans(done.stdout)
    assert answer == "Lisbon is sunny (24C); Oslo is cold (3C)."
    [turn] = [s for s in spans if s["name"] == "invoke_agent weather-agent"]
    children = sorted(s["name"] for s in spans if s["parent_id"] == turn["context"]["span_id"])
    assert children == ["chat scripted"] * 3 + ["execute_tool get_weather"] * 2
    assert [s["status"]["status_code"] for s in spans if s["name"] == "chat scripted"] == ["ERROR", "UNSET", "UNSET"]
    assert turn["resource"]["attributes"]["service.name"] == "think-otel-example"
    assert list(tmp_path.iterdir()) == []  # the example writes no files
