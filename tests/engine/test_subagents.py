"""Sub-agents (``agent.as_tool``): the child's turn runs in a child session linked to the parent's
call, streams its progress as preliminary results, is cancelled with the parent, rolls its usage
up into the parent's, and loads the parent's plugins — delegating does not escape a guard."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console

from tests.support.agents import make_agent
from think_core import PARENT_CALL_KEY, StepResult, TurnResult, Usage, hookimpl, tool
from think_core.cli.chat import ChunkPrinter
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.subagents import child_session_id
from think_plugins.budget import Budget
from think_plugins.otel import OTelTracing
from think_plugins.readonly import ReadOnlyGuard

CHILD_USAGE = Usage(input_tokens=100, output_tokens=20, total_tokens=120)
PARENT_USAGE = Usage(input_tokens=10, output_tokens=2, total_tokens=12)


def delegating(task: str = "clean up", call_id: str = "p1") -> ScriptedModel:
    """The parent's model: it hands ``task`` to the ``helper`` sub-agent, then answers."""
    return ScriptedModel([
        Step(tool_calls=[call("helper", {"task": task}, id=call_id)], usage=PARENT_USAGE),
        Step(text="parent done", usage=PARENT_USAGE),
    ])


def deleting_child(deleted: list[str], **kwargs: Any) -> Any:
    """A child agent whose model deletes a file, then reports."""

    @tool(destructive=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    model = ScriptedModel([
        Step(text="Deleting.", tool_calls=[call("delete_file", {"path": "/etc/hosts"}, id="c1")], usage=CHILD_USAGE),
        Step(text="child done", usage=CHILD_USAGE),
    ])
    return make_agent(model, tools=[delete_file], **kwargs)


def gated_child(released: asyncio.Event, last_text: str) -> Any:
    """A child agent whose model deletes a file and then says ``last_text``; the deletion
    waits until ``released`` is set (so a test sees the call running first)."""

    @tool
    async def delete_file(path: str) -> str:
        """Delete a file (once the test has seen that it is running)."""
        await asyncio.wait_for(released.wait(), 30)
        return f"deleted {path}"

    return make_agent(ScriptedModel([
        Step(text="Deleting.", tool_calls=[call("delete_file", {"path": "/etc/hosts"}, id="c1")]),
        Step(text=last_text),
    ]), tools=[delete_file])


def tool_part(message: Any, name: str) -> dict[str, Any]:
    [part] = [p for p in message.parts if p.get("type") == f"tool-{name}"]
    return part


async def test_a_sub_agents_destructive_tool_is_blocked_by_the_parents_read_only_guard() -> None:
    deleted: list[str] = []
    child = deleting_child(deleted)
    guard = ReadOnlyGuard({"enabled": True, "allow": ["helper"]})  # delegating is allowed, deleting is not
    parent = make_agent(delegating(), tools=[child.as_tool("helper", "A helper agent.")], plugins=[guard])
    result = await parent.session("p").chat("tidy up")
    assert result.status == "completed" and result.text == "parent done"
    assert deleted == []
    sid = child_session_id("p", "helper", "p1")
    [answer] = [m for m in await child.session(sid).messages() if m.role == "assistant"]
    blocked = tool_part(answer, "delete_file")
    assert "read-only" in str(blocked["output"]) and answer.metadata is not None
    assert tool_part(result.message, "helper")["output"]["text"].endswith("child done")


async def test_a_guard_of_the_same_name_in_the_child_does_not_hide_the_parents(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child loaded its own (inactive) ``readonly_guard`` from its entry point; the parent's
    configured one runs beside it."""
    monkeypatch.setenv("THINK_PLUGINS", "readonly_guard")  # the suite loads no entry point otherwise
    deleted: list[str] = []
    child = deleting_child(deleted, load_entrypoints=True)
    assert child.plugin_manager.has_plugin("readonly_guard")
    parent = make_agent(
        delegating(), tools=[child.as_tool("helper", "A helper agent.")], load_entrypoints=True,
        settings={"readonly_guard": {"enabled": True, "allow": ["helper"]}},
    )
    assert (await parent.session("p").chat("tidy up")).status == "completed"
    assert deleted == []
    assert child.plugin_manager.has_plugin("readonly_guard@caller")


async def test_closing_the_sub_agent_leaves_the_parents_plugins_open() -> None:
    closed: list[str] = []

    class Sink:
        name = "sink"

        async def aclose(self) -> None:
            closed.append("sink")

    child = deleting_child([])
    parent = make_agent(delegating(), tools=[child.as_tool("helper", "A helper agent.")], plugins=[Sink()])
    await parent.session("p").chat("tidy up")
    assert child.plugin_manager.has_plugin("sink")
    await child.aclose()
    assert closed == []
    await parent.aclose()
    assert closed == ["sink"]


async def test_a_clients_read_only_body_holds_in_the_sub_agent() -> None:
    deleted: list[str] = []
    child = deleting_child(deleted)
    guard = ReadOnlyGuard({"allow": ["helper"]})  # off unless the turn's body asks for it
    parent = make_agent(delegating(), tools=[child.as_tool("helper", "A helper agent.")], plugins=[guard])
    await parent.session("p").chat("tidy up", body={"read_only": True})
    assert deleted == []


async def test_without_a_guard_the_sub_agent_acts_and_its_usage_is_the_parents() -> None:
    deleted: list[str] = []
    child = deleting_child(deleted)
    steps: list[tuple[str, Usage]] = []

    class StepUsage:  # what a budget counting step records sees
        @hookimpl
        def on_step_finish(self, ctx: StepResult) -> None:
            steps.append((ctx.session.id, ctx.usage))

    parent = make_agent(delegating(), tools=[child.as_tool("helper", "A helper agent.")], plugins=[StepUsage()])
    result = await parent.session("p").chat("tidy up")
    assert deleted == ["/etc/hosts"]
    assert result.usage == PARENT_USAGE + PARENT_USAGE + CHILD_USAGE + CHILD_USAGE
    sid = child_session_id("p", "helper", "p1")
    # The child's steps (the parent's plugin runs in the child too), then the parent's: the step
    # that called the sub-agent counts the child's usage.
    assert steps == [(sid, CHILD_USAGE), (sid, CHILD_USAGE), ("p", PARENT_USAGE + CHILD_USAGE + CHILD_USAGE),
                     ("p", PARENT_USAGE)]


async def test_both_transcripts_link_parent_and_child_and_progress_streams() -> None:
    seen_running = asyncio.Event()
    child = gated_child(seen_running, "child done")  # deletes once the parent's client saw it running
    parent = make_agent(delegating(), tools=[child.as_tool("helper", "A helper agent.")])
    chunks: list[dict[str, Any]] = []

    def on_event(chunk: dict[str, Any]) -> None:
        chunks.append(chunk)
        if chunk.get("preliminary") and {"tool": "delete_file", "state": "running"} in chunk["output"].get("tools", []):
            seen_running.set()

    result = await parent.session("p").chat("tidy up", on_event=on_event)
    sid = child_session_id("p", "helper", "p1")
    child_messages = await child.session(sid).messages()
    assert child_messages[0].role == "user" and child_messages[0].metadata is not None
    assert child_messages[0].metadata[PARENT_CALL_KEY] == {
        "session_id": "p", "request_id": result.request_id, "tool_call_id": "p1", "tool_name": "helper"
    }
    [answer] = [m for m in await parent.session("p").messages() if m.role == "assistant"]
    assert tool_part(answer, "helper")["output"] == {
        "session_id": sid, "status": "completed", "text": "Deleting.child done",
        "tools": [{"tool": "delete_file", "state": "done"}],
    }
    progress = [c["output"] for c in chunks if c.get("type") == "tool-output-available" and c.get("preliminary")]
    assert progress, "the child's progress streamed as preliminary results"
    *running, last = progress  # every item a tool yields streams; the last is also the result
    assert running and all(p["session_id"] == sid and p["status"] == "running" for p in running)
    assert last["status"] == "completed"
    assert {"tool": "delete_file", "state": "running"} in running[0]["tools"]
    assert {"tool": "delete_file", "state": "done"} in running[-1]["tools"]
    assert any(p["text"] == "Deleting." for p in running)


async def test_cancelling_the_parent_cancels_the_child() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Wait."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    child = make_agent(ScriptedModel([Step(tool_calls=[call("wait_forever", {}, id="w1")])]), tools=[wait_forever])
    parent = make_agent(delegating(), tools=[child.as_tool("helper", "A helper agent.")])
    session = parent.session("p")
    turn = asyncio.ensure_future(session.chat("wait"))
    await asyncio.wait_for(started.wait(), 30)
    assert session.cancel_all() == 1
    result: TurnResult = await asyncio.wait_for(turn, 30)
    assert result.status == "aborted"
    assert cancelled.is_set()
    child_session = child.session(child_session_id("p", "helper", "p1"))
    assert not child_session.active_request_ids
    [_, stopped] = await child_session.messages()  # the child's partial answer, stored as stopped
    assert stopped.role == "assistant" and stopped.metadata == {"stopped": True}
    assert tool_part(stopped, "wait_forever")["state"] == "output-error"


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield provider, spans
    provider.shutdown()


async def test_the_child_turns_span_is_under_the_parents_tool_call_span(
    exporter: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, spans = exporter
    child = deleting_child([])
    parent = make_agent(
        delegating(), tools=[child.as_tool("helper", "A helper agent.")], plugins=[OTelTracing(tracer_provider=provider)]
    )
    result = await parent.session("p").chat("tidy up")
    finished = spans.get_finished_spans()
    turns = [s for s in finished if s.name.startswith("invoke_agent")]
    parent_turn = next(s for s in turns if s.attributes["gen_ai.conversation.id"] == "p")
    child_turn = next(s for s in turns if s.attributes["gen_ai.conversation.id"] == child_session_id("p", "helper", "p1"))
    call_span = next(s for s in finished if s.name == "execute_tool helper")
    assert call_span.parent is not None and call_span.parent.span_id == parent_turn.context.span_id
    assert child_turn.parent is not None and child_turn.parent.span_id == call_span.context.span_id
    assert child_turn.context.trace_id == parent_turn.context.trace_id
    assert child_turn.attributes["think.parent.session_id"] == "p"
    assert child_turn.attributes["think.parent.request_id"] == result.request_id
    assert child_turn.attributes["think.parent.tool_call_id"] == "p1"
    child_tool = next(s for s in finished if s.name == "execute_tool delete_file")
    assert child_tool.parent is not None and child_tool.parent.span_id == child_turn.context.span_id


async def test_think_chat_shows_a_sub_agents_progress_under_the_parents_call() -> None:
    shown_running = asyncio.Event()
    child = gated_child(shown_running, "Done.")  # deletes once the terminal showed it running
    parent = make_agent(delegating(), tools=[child.as_tool("helper", "A helper agent.")])
    console = Console(record=True, width=200)
    printer = ChunkPrinter(console)
    async for chunk in parent.session("p").stream("tidy up"):
        printer.feed(chunk)
        if "… helper → delete_file running" in console.export_text(clear=False):
            shown_running.set()
    lines = [line.strip() for line in console.export_text().splitlines() if line.strip()]
    helper = [line for line in lines if line.startswith("… helper")]
    assert helper == [
        "… helper: Deleting.", "… helper → delete_file running", "… helper → delete_file done", "… helper: Done.",
    ] or helper == [  # the last two updates may come as one
        "… helper: Deleting.", "… helper → delete_file running", "… helper: Done.", "… helper → delete_file done",
    ]
    assert any(line.startswith("← helper") and "Deleting.Done." in line for line in lines)


async def test_a_failed_sub_agent_turn_is_the_calls_error_for_the_parent() -> None:
    child = make_agent(ScriptedModel([Step(error=ValueError("the child's model is down"))]),
                       retry={"max_retries": 0})
    parent = make_agent(delegating(), tools=[child.as_tool("helper", "A helper agent.")])
    result = await parent.session("p").chat("tidy up")
    assert result.status == "completed" and result.text == "parent done"  # the parent's model was told
    assert result.message is not None
    part = tool_part(result.message, "helper")
    assert part["state"] == "output-error"
    assert "sub-agent 'helper' failed" in part["errorText"] and "the child's model is down" in part["errorText"]


async def test_a_budget_cannot_be_bypassed_by_delegating() -> None:
    """The parent's ``budget`` runs in the child: the child's step that crosses the turn limit
    has its tool call answered "budget exhausted" and its turn ends; what the child spent counts
    in the parent's turn, which ends after that step too."""
    deleted: list[str] = []

    @tool(destructive=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    expensive = Usage(input_tokens=180, output_tokens=20, total_tokens=200)
    child = make_agent(ScriptedModel([
        Step(text="Deleting.", tool_calls=[call("delete_file", {"path": "/etc/hosts"}, id="c1")], usage=expensive),
        Step(text="child done", usage=expensive),
    ]), tools=[delete_file])
    parent = make_agent(delegating(), tools=[child.as_tool("helper", "A helper agent.")],
                        plugins=[Budget({"turn_tokens": 150})])
    result = await parent.session("p").chat("tidy up")
    assert deleted == []  # blocked in the child by the parent's budget
    [child_answer] = [m for m in await child.session(child_session_id("p", "helper", "p1")).messages()
                      if m.role == "assistant"]
    assert "budget" in str(tool_part(child_answer, "delete_file")["output"]).lower()
    assert result.message is not None
    helper = tool_part(result.message, "helper")
    assert helper["state"] == "output-error" and "turn_tokens" in helper["errorText"]
    assert result.status == "error" and result.error is not None and "turn_tokens" in result.error
    assert result.usage == PARENT_USAGE + expensive  # the child's spending is the parent's
