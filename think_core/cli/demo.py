"""Run an offline demo: a scripted agent, the bundled plugins, and the hook timeline.

No API key and no network: the model is a ScriptedModel. Five turns show a parallel tool
call, a cached tool result (tool_cache), a call blocked in read-only mode (readonly_guard), a
context-window overflow that overflow_classifier recognises so the turn is compacted and re-run,
and a call a plugin asks a human to approve (``ask``) whose result ``redact`` masks;
analytics records everything and the summary is printed at the end.
"""

from __future__ import annotations

import argparse
import inspect
import tempfile
import time
from pathlib import Path
from typing import Any

from .. import (
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    ProviderError,
    SessionView,
    StepContext,
    StepResult,
    ToolCallContext,
    ToolCallResultContext,
    TurnContext,
    TurnResult,
    UIMessage,
    hookimpl,
)
from ..agent import Think
from ..messages import tool_name_of
from ..models.base import ModelRequest
from ..models.scripted import ScriptedModel, Step
from ..turn.compaction import SUMMARY_SYSTEM
from ..turn.ui_stream import stored_decisions
from . import plugin_command
from .demo_model import PHONE, TOOLS, DemoPolicy, demo_step


class DemoModel:
    """The scripted model: follows the last user message (see ``demo_model``), summarises when
    asked to compact, and overflows its context window once, on the turn that asks for
    "everything"."""

    def __init__(self) -> None:
        self.overflowed = False

    def __call__(self, request: ModelRequest) -> Step:
        if request.system == SUMMARY_SYSTEM:
            return Step(text="The user asked about the weather in Lisbon and Oslo and tried to save a note.")
        last = request.messages[-1]
        if last.role == "user" and "everything" in last.text and not self.overflowed:
            self.overflowed = True
            return Step(error=CONTEXT_OVERFLOW)
        return demo_step(request)


#: What a provider answers when the prompt no longer fits (OpenAI's real error body).
CONTEXT_OVERFLOW = ProviderError(
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9120 tokens. "
    "Please reduce the length of the messages.",
    status=400,
    code="context_length_exceeded",
    type="invalid_request_error",
    provider="scripted",
)


class Timeline:
    """Records every hook call of a turn, for printing (a plugin like any other)."""

    name = "demo_timeline"

    def __init__(self) -> None:
        self.events: list[tuple[float, str, str]] = []
        self.chunks = 0
        self._deciding: dict[str, int] = {}  # tool call id → its before_tool_call line
        self.started = time.perf_counter()

    def _add(self, hook: str, detail: str = "") -> None:
        self.events.append(((time.perf_counter() - self.started) * 1000, hook, detail))

    @hookimpl
    def configure_session(self, session: SessionView) -> None:
        self._add("configure_session", f"session {session.id!r}")

    @hookimpl
    def before_turn(self, ctx: TurnContext) -> None:
        self._add("before_turn", f"trigger={ctx.trigger} body={ctx.body}")

    @hookimpl
    def classify_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> None:
        self._add("classify_chat_error", f"stage={ctx.stage}: {error}")

    @hookimpl
    def before_step(self, ctx: StepContext) -> None:
        self._add("before_step", f"step {ctx.step_number}, {len(ctx.messages)} messages")

    @hookimpl
    def on_chunk(self, ctx: ChunkContext) -> None:
        self.chunks += 1

    @hookimpl(tryfirst=True)
    def before_tool_call(self, ctx: ToolCallContext) -> None:
        # The decision is taken here, by whichever plugin answers; it is known once the call has
        # ended, and then written into this line (see after_tool_call).
        self._deciding[ctx.tool_call_id] = len(self.events)
        self._add("before_tool_call", f"{ctx.tool_name}({ctx.input})")

    @hookimpl
    def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        index = self._deciding.pop(ctx.tool_call_id, None)
        if index is not None:
            at, hook, detail = self.events[index]
            by = f" by {ctx.decided_by}" if ctx.decided_by else ""
            self.events[index] = (at, hook, f"{detail} → {ctx.decision}{by}")
        self._add("after_tool_call", f"{ctx.tool_name}: {ctx.output!r}")

    @hookimpl
    def on_step_finish(self, ctx: StepResult) -> None:
        self._add("on_step_finish", f"step {ctx.step_number}: {ctx.finish_reason}, {ctx.usage.total_tokens} tokens, {self.chunks} chunks")
        self.chunks = 0

    @hookimpl
    def on_chat_response(self, result: ChatResponseResult) -> None:
        self._add("on_chat_response", f"status={result.status}")

    def drain(self) -> list[tuple[float, str, str]]:
        events, self.events = self.events, []
        return events


TURNS = [
    ("What's the weather in Lisbon and Oslo?", None),
    ("And Lisbon again, please?", None),
    ("Save a note: buy oranges.", {"read_only": True}),
    ("Now tell me everything we talked about.", None),
    ("Save a note: call Ana on 555-0123.", None),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, help="SQLite file for the conversation, analytics.db beside it (default: temporary, removed afterwards)")
    parser.add_argument("--plain", action="store_true", help="plain text output (no colours)")


async def run(args: argparse.Namespace) -> int:
    if args.db:
        return await _run(args, Path(args.db))
    # Nothing asked to be kept: the demo's files live as long as the demo.
    with tempfile.TemporaryDirectory(prefix="think-demo-") as workdir:
        return await _run(args, Path(workdir) / "conversation.db")


async def _run(args: argparse.Namespace, db: Path) -> int:
    workdir = db.parent
    analytics_db = workdir / "analytics.db"
    timeline = Timeline()
    agent = Think(
        ScriptedModel([DemoModel()], repeat=True, delay=0.002),
        system="You are a weather assistant.",
        tools=TOOLS,
        plugins=[timeline, DemoPolicy()],
        store=str(db),
        settings={
            "analytics": {"sink": "sqlite", "path": str(analytics_db)},
            "redact": {"patterns": [PHONE.pattern], "tool_results": True},
        },
        context_overflow={"reactive": True, "max_retries": 1},
        compaction={"tail_tokens": 40, "min_tail_messages": 1},
    )
    out = _Output(plain=args.plain)
    loaded = [(i.name, i.status) for i in agent.plugin_manager.plugin_infos]
    out.header("think demo", "plugins: " + ", ".join(f"{n} ({s})" for n, s in loaded))
    session = agent.session("demo")
    try:
        for prompt, body in TURNS:
            mode = " [read-only mode]" if body and body.get("read_only") else ""
            out.user(prompt + mode)
            compactions = len(session.compaction_events)
            result = await session.chat(prompt, body=body)
            out.timeline(timeline.drain())
            for event in session.compaction_events[compactions:]:
                out.note(
                    f"context overflow classified by overflow_classifier → compacted {event.compacted_messages} "
                    f"messages (~{event.tokens_before} → ~{event.tokens_after} tokens) and re-ran the turn"
                )
            result = await _approve_asked(session, result, out, timeline)
            out.answer(result.text, result.status, result.usage.total_tokens)
            _shaped(result.message, out)
    finally:
        await agent.aclose()
    for info in agent.plugin_manager.plugin_infos:
        plugin = agent.plugin_manager.get_plugin(info.name)
        stats = getattr(plugin, "stats", None)
        if stats is not None:
            out.note(f"{info.name} stats: {stats}")
    # The report is the analytics plugin's own command, found through register_commands.
    report = plugin_command(
        agent.plugin_manager,
        ["analytics", "report", "--db", str(analytics_db), *(["--plain"] if args.plain else [])],
    )
    if report is not None and analytics_db.exists():
        out.note("\nanalytics summary (think analytics report):")
        outcome = report()
        if inspect.isawaitable(outcome):
            await outcome
    if args.db:
        out.note(f"conversation stored in {db}")
        out.note(f"analytics stored in {analytics_db} (see: think analytics report --db {analytics_db})")
    else:
        out.note("the demo's conversation and analytics were temporary (think demo --db FILE keeps them)")
    return 0


async def _approve_asked(session: Any, result: TurnResult, out: _Output, timeline: Timeline) -> TurnResult:
    """A call waiting for a human: say who asked and why, approve it (the demo's human says
    yes), and show the continuation the approval runs."""
    message = result.message
    waiting = [p for p in (message.parts if message else []) if p.get("state") == "approval-requested"]
    if not waiting or message is None:
        return result
    decisions = stored_decisions(message.metadata)
    for part in waiting:
        decided = decisions.get(part["toolCallId"]) or {}
        asker = f"asked by {decided.get('by')}: {decided.get('reason')}" if decided.get("decision") == "ask" else "needs approval"
        out.note(f"{tool_name_of(part)} waits for a human ({asker}); the demo approves it")
    for index, part in enumerate(waiting):
        approved = await session.approve_tool_call(part["toolCallId"], True, auto_continue=index == len(waiting) - 1)
        result = approved if approved is not None else result
    out.timeline(timeline.drain())
    return result


def _shaped(message: UIMessage | None, out: _Output) -> None:
    """Which plugins rewrote a tool result or shaped the answer (``redact``)."""
    metadata = (message.metadata if message else None) or {}
    for decided in stored_decisions(metadata).values():
        if decided.get("rewrittenBy"):
            out.note(f"a tool result was rewritten by {', '.join(decided['rewrittenBy'])}")
    if metadata.get("transformedBy"):
        out.note(f"the answer's stream was shaped by {', '.join(metadata['transformedBy'])}")


class _Output:
    """Rich output when available, plain text otherwise."""

    def __init__(self, plain: bool) -> None:
        self.console: Any = None
        if not plain:
            try:
                from rich.console import Console

                self.console = Console(highlight=False)
            except ImportError:
                pass

    def _print(self, text: str, style: str = "") -> None:
        if self.console is not None:
            self.console.print(text, style=style or None, markup=False)
        else:
            print(text)

    def header(self, title: str, subtitle: str) -> None:
        if self.console is not None:
            from rich.panel import Panel

            self.console.print(Panel(subtitle, title=title, expand=False))
        else:
            print(f"== {title} ==\n{subtitle}")

    def user(self, text: str) -> None:
        self._print(f"\n> user: {text}", "bold cyan")

    def timeline(self, events: list[tuple[float, str, str]]) -> None:
        if self.console is not None:
            from rich.table import Table

            table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
            table.add_column("ms", justify="right", style="dim")
            table.add_column("hook", style="magenta")
            table.add_column("detail", overflow="fold")
            for at, hook, detail in events:
                table.add_row(f"{at:8.1f}", hook, detail)
            self.console.print(table)
        else:
            for at, hook, detail in events:
                print(f"{at:8.1f}  {hook:<18} {detail}")

    def answer(self, text: str, status: str, tokens: int) -> None:
        self._print(f"< assistant ({status}, {tokens} tokens): {text}", "bold green")

    def note(self, text: str) -> None:
        self._print(text, "dim")
