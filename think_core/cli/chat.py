"""Chat with an agent in the terminal: streamed replies, tool calls, approvals.

Commands: /history (show the conversation), /reset (clear it), /help, /quit (or Ctrl-D).
Ctrl-C while a reply streams stops it (the partial reply is kept).

Example: think chat --model openai:gpt-4o-mini --session work
         think chat --model demo                    (offline)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ConfigurationError
from ..messages import is_tool_part, tool_name_of
from ..session import Session
from ..types import ToolPartState
from .common import add_agent_arguments
from .serve import add_plugin_arguments, agent_from_args

HELP = "commands: /history  /reset  /help  /quit   (Ctrl-C stops a streaming reply)"
MAX_SHOWN = 400  # characters of a tool input/output shown inline


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_agent_arguments(parser)
    add_plugin_arguments(parser)
    parser.add_argument("--session", default="cli", help="session id (default: cli); history persists in --db")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


class ChunkPrinter:
    """Renders UI message chunks to a rich console as they arrive."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.tool_names: dict[str, str] = {}
        self.approvals: list[tuple[str, str, Any]] = []  # (tool call id, tool name, input)
        self.inputs: dict[str, Any] = {}
        self.failed = False
        self._mid_line = False

    def _line(self, markup: str) -> None:
        if self._mid_line:
            self.console.print()
            self._mid_line = False
        self.console.print(markup, highlight=False)

    def feed(self, chunk: dict[str, Any]) -> None:
        kind = chunk.get("type")
        if kind == "text-delta":
            self.console.print(chunk["delta"], end="", markup=False, highlight=False, soft_wrap=True)
            self._mid_line = True
        elif kind == "reasoning-start":
            # Labelled, so the model's thinking is not read as its answer.
            self.console.print("(thinking) ", end="", style="dim", markup=False, highlight=False)
            self._mid_line = True
        elif kind == "reasoning-delta":
            self.console.print(chunk["delta"], end="", style="dim italic", markup=False, highlight=False, soft_wrap=True)
            self._mid_line = True
        elif kind in ("reasoning-end", "text-end"):
            if self._mid_line:
                self.console.print()
                self._mid_line = False
        elif kind == "tool-input-start":
            self.tool_names[chunk["toolCallId"]] = chunk["toolName"]
        elif kind == "tool-input-available":
            self.tool_names[chunk["toolCallId"]] = chunk["toolName"]
            self.inputs[chunk["toolCallId"]] = chunk.get("input")
            self._line(f"[cyan]→ {chunk['toolName']}[/] [dim]{_escape(_short(chunk.get('input')))}[/]")
        elif kind == "tool-output-available":
            name = self.tool_names.get(chunk["toolCallId"], "tool")
            self._line(f"[green]← {name}[/] {_escape(_short(chunk.get('output')))}")
        elif kind == "tool-output-error":
            name = self.tool_names.get(chunk["toolCallId"], "tool")
            self._line(f"[red]✗ {name}[/] {_escape(chunk.get('errorText', ''))}")
        elif kind == "tool-approval-request":
            call_id = chunk["toolCallId"]
            self.approvals.append((call_id, self.tool_names.get(call_id, "tool"), self.inputs.get(call_id)))
        elif kind == "error":
            self.failed = True
            self._line(f"[red]error:[/] {_escape(chunk.get('errorText', ''))}")
        elif kind == "abort":
            self._line("[yellow](stopped)[/]")
        elif kind == "finish":
            if self._mid_line:
                self.console.print()
                self._mid_line = False


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class ChatREPL:
    """The read-eval-print loop; ``read_line`` returns ``None`` at end of input."""

    def __init__(self, session: Session, console: Any, read_line: Callable[[str], Awaitable[str | None]]) -> None:
        self.session = session
        self.console = console
        self.read_line = read_line

    async def run(self) -> int:
        self.console.print(f"[bold]think chat[/] — session [b]{_escape(self.session.id)}[/]. {HELP}", highlight=False)
        while True:
            line = await self.read_line("you> ")
            if line is None:
                self.console.print()
                return 0
            text = line.strip()
            if not text:
                continue
            if text.startswith("/"):
                if not await self.command(text):
                    return 0
                continue
            await self.turn(text)

    async def command(self, text: str) -> bool:
        """Run a slash command; ``False`` means quit."""
        name = text.split()[0].lower()
        if name in ("/quit", "/exit", "/q"):
            return False
        if name == "/reset":
            await self.session.clear()
            self.console.print("[dim]history cleared[/]")
        elif name == "/history":
            await self.show_history()
        elif name == "/help":
            self.console.print(HELP, highlight=False)
        else:
            self.console.print(f"[red]unknown command {_escape(name)}[/] — {HELP}", highlight=False)
        return True

    async def show_history(self) -> None:
        messages = await self.session.messages()
        if not messages:
            self.console.print("[dim](no messages)[/]")
        for message in messages:
            style = "bold blue" if message.role == "user" else "bold green"
            self.console.print(f"[{style}]{message.role}[/]: {_escape(message.text)}", highlight=False)
            for part in message.parts:
                if is_tool_part(part):
                    state: ToolPartState | None = part.get("state")
                    outcome = part.get("output") if state == "output-available" else part.get("errorText") or state
                    self.console.print(f"    [cyan]{tool_name_of(part)}[/] {_escape(_short(part.get('input')))} → {_escape(_short(outcome))}", highlight=False)

    async def turn(self, text: str) -> None:
        printer = ChunkPrinter(self.console)
        self.console.print("[bold green]agent>[/] ", end="")
        try:
            async for chunk in self.session.stream(text):
                printer.feed(chunk)
            while printer.approvals:
                pending, printer.approvals = printer.approvals, []
                for index, (call_id, name, tool_input) in enumerate(pending):
                    answer = await self.read_line(f"allow {name}({_short(tool_input)})? [y/N] ")
                    approved = (answer or "").strip().lower() in ("y", "yes")
                    # The batch continues once its last approval is answered.
                    await self.session.approve_tool_call(
                        call_id, approved, auto_continue=index == len(pending) - 1, on_event=printer.feed
                    )
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                task.uncancel()  # Ctrl-C: stop this reply, keep the REPL
            self.console.print("\n[yellow](stopped)[/]")


async def _read_line(prompt: str) -> str | None:
    try:
        return await asyncio.to_thread(input, prompt)
    except EOFError:
        return None


async def run(args: argparse.Namespace) -> int:
    try:
        from rich.console import Console
    except ImportError:
        print("think chat: needs rich; pip install 'think[cli]'", file=sys.stderr)
        return 2
    try:
        agent = agent_from_args(args)
    except ConfigurationError as exc:
        print(f"think: {exc}", file=sys.stderr)
        return 2
    try:
        return await ChatREPL(agent.session(args.session), Console(), _read_line).run()
    finally:
        await agent.aclose()
