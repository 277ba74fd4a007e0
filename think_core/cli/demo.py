"""Run an offline demo: a scripted agent, the bundled plugins, and the hook timeline.

No API key and no network: the model is a ScriptedModel. Three turns show a parallel tool
call, a cached tool result (tool_cache), and a call blocked in read-only mode (readonly_guard);
analytics records everything and the summary is printed at the end.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from .. import hookimpl, tool
from ..agent import Think
from ..models.base import ModelRequest
from ..models.scripted import ScriptedModel, Step, call

CITIES = {"lisbon": ("Lisbon", 21, "sunny"), "oslo": ("Oslo", -3, "snowing"), "tokyo": ("Tokyo", 12, "clear")}


@tool(read_only=True)
def get_weather(city: str) -> dict:
    """Current weather for a city."""
    name, temp, sky = CITIES.get(city.lower(), (city, 15, "cloudy"))
    return {"city": name, "temperature_c": temp, "sky": sky}


@tool(destructive=True)
def save_note(text: str) -> str:
    """Save a note to the user's notebook."""
    return f"saved: {text}"


def demo_step(request: ModelRequest) -> Step:
    """The scripted model: asks for tools based on the last user message, then answers from
    the tool results it was given."""
    last = request.messages[-1]
    if last.role == "tool":
        results = [m for m in request.messages[::-1] if m.role == "tool"]
        lines = []
        for result in reversed(results[: _trailing_tool_count(request)]):
            out = result.output
            if isinstance(out, dict):
                lines.append(f"{out['city']}: {out['temperature_c']}°C and {out['sky']}")
            elif "blocked" in str(out):
                return Step(text=" I can't save notes right now: this session is read-only.")
            else:
                lines.append(str(out))
        return Step(text="Here is what I found. " + "; ".join(lines) + ".")
    text = last.content.lower() if last.role == "user" else ""
    if "note" in text:
        return Step(text="I'll save that.", tool_calls=[call("save_note", {"text": "buy oranges"})])
    cities = [c for c in CITIES if c in text] or ["lisbon"]
    return Step(reasoning="The user wants the weather; I will call the tool.", tool_calls=[call("get_weather", {"city": c}) for c in cities])


def _trailing_tool_count(request: ModelRequest) -> int:
    count = 0
    for message in reversed(request.messages):
        if message.role != "tool":
            break
        count += 1
    return count


class Timeline:
    """Records every hook call of a turn, for printing (a plugin like any other)."""

    name = "demo_timeline"

    def __init__(self) -> None:
        self.events: list[tuple[float, str, str]] = []
        self.chunks = 0
        self.started = time.perf_counter()

    def _add(self, hook: str, detail: str = "") -> None:
        self.events.append(((time.perf_counter() - self.started) * 1000, hook, detail))

    @hookimpl
    def configure_session(self, session):
        self._add("configure_session", f"session {session.id!r}")

    @hookimpl
    def before_turn(self, ctx):
        self._add("before_turn", f"trigger={ctx.trigger} body={ctx.body}")

    @hookimpl
    def before_step(self, ctx):
        self._add("before_step", f"step {ctx.step_number}, {len(ctx.messages)} messages")

    @hookimpl
    def on_chunk(self, ctx):
        self.chunks += 1

    @hookimpl
    def after_tool_call(self, ctx):
        self._add("after_tool_call", f"{ctx.tool_name}({ctx.input}) → {ctx.decision}: {ctx.output!r}")

    @hookimpl
    def on_step_finish(self, ctx):
        self._add("on_step_finish", f"step {ctx.step_number}: {ctx.finish_reason}, {ctx.usage.total_tokens} tokens, {self.chunks} chunks")
        self.chunks = 0

    @hookimpl
    def on_chat_response(self, result):
        self._add("on_chat_response", f"status={result.status}")

    def drain(self) -> list[tuple[float, str, str]]:
        events, self.events = self.events, []
        return events


TURNS = [
    ("What's the weather in Lisbon and Oslo?", None),
    ("And Lisbon again, please?", None),
    ("Save a note: buy oranges.", {"read_only": True}),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, help="SQLite file for the conversation (default: a temporary directory)")
    parser.add_argument("--plain", action="store_true", help="plain text output (no colours)")


async def run(args: argparse.Namespace) -> int:
    from .analytics_cmd import summarize
    from think_plugins.analytics import read_sqlite_points

    workdir = Path(args.db).parent if args.db else Path(tempfile.mkdtemp(prefix="think-demo-"))
    db = Path(args.db) if args.db else workdir / "conversation.db"
    analytics_db = workdir / "analytics.db"
    timeline = Timeline()
    agent = Think(
        ScriptedModel([demo_step], repeat=True, delay=0.002),
        system="You are a weather assistant.",
        tools=[get_weather, save_note],
        plugins=[timeline],
        store=str(db),
        settings={"analytics": {"sink": "sqlite", "path": str(analytics_db)}},
    )
    out = _Output(plain=args.plain)
    loaded = [(i.name, i.status) for i in agent.plugin_manager.plugin_infos]
    out.header("think demo", "plugins: " + ", ".join(f"{n} ({s})" for n, s in loaded))
    session = agent.session("demo")
    try:
        for prompt, body in TURNS:
            mode = " [read-only mode]" if body and body.get("read_only") else ""
            out.user(prompt + mode)
            result = await session.chat(prompt, body=body)
            out.timeline(timeline.drain())
            out.answer(result.text, result.status, result.usage.total_tokens)
    finally:
        await agent.aclose()
    for info in agent.plugin_manager.plugin_infos:
        plugin = agent.plugin_manager.get_plugin(info.name)
        stats = getattr(plugin, "stats", None)
        if stats is not None:
            out.note(f"{info.name} stats: {stats}")
    summary = summarize(read_sqlite_points(analytics_db)) if analytics_db.exists() else None
    if summary:
        out.summary(summary)
    out.note(f"conversation stored in {db}")
    out.note(f"analytics stored in {analytics_db} (see: think analytics report --db {analytics_db})")
    return 0


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

    def summary(self, summary: dict[str, Any]) -> None:
        self._print("\nanalytics summary", "bold")
        for key, value in summary.items():
            self._print(f"  {key}: {value}")

    def note(self, text: str) -> None:
        self._print(text, "dim")
