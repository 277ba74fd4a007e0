"""Chat with an agent in the terminal: streamed replies, tool calls, approvals.

Commands: /history (show the conversation, step by step), /reset (clear it), /attach PATH (a
file for the next message: an image, a PDF, ...), /help, /quit.
Ctrl-C while a reply streams stops it (the partial reply is kept); at the prompt, Ctrl-C
twice or Ctrl-D quits.

Example: think chat --model openai:gpt-4o-mini --session work
         think chat --model demo                    (offline)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ConfigurationError, InvalidAttachment
from ..hooks.markers import hookimpl
from ..messages import is_tool_part, split_steps, tool_name_of
from ..session import Session
from ..turn.ui_stream import stored_decisions
from ..types import ToolCallResultContext, ToolPartState
from .attach import file_part, message_with_files
from .cited import CITED_TYPES, cited_line
from .common import add_agent_arguments, endpoint_note, quiet_turn_failures
from .history import outcome_lines
from .serve import add_plugin_arguments, agent_from_args
from .terminal import Interrupted, Terminal

HELP = "commands: /history  /reset  /attach PATH  /help  /quit   (Ctrl-C stops a streaming reply; Ctrl-C twice or Ctrl-D quits)"
MAX_SHOWN = 400  # characters of a tool input/output shown inline


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_agent_arguments(parser)
    add_plugin_arguments(parser)
    parser.add_argument("--session", default="cli", help="session id (default: cli); history persists in --db")


def _short(value: Any) -> str:
    if _has_files(value):  # a tool's File results: named, never their base64
        value = " ".join(f"[{_file_label(v)}]" if v.get("type") == "file" else str(v.get("text", "")) for v in value)
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


class ChunkPrinter:
    """Renders UI message chunks to a rich console as they arrive."""

    def __init__(self, console: Any, decisions: DecisionLog | None = None, endpoint: str = "") -> None:
        self.console = console
        self.endpoint = endpoint  # " (model endpoint URL)", named in every error
        self.decisions = decisions or DecisionLog()
        self.tool_names: dict[str, str] = {}
        self.approvals: list[tuple[str, str, Any, str | None]] = []  # (tool call id, tool name, input, reason)
        self.inputs: dict[str, Any] = {}
        #: What was shown of each running sub-agent call: its text and its tool calls' states.
        self.progress: dict[str, tuple[str, list[Any]]] = {}
        self.failed = False
        self._mid_line = False

    def _line(self, markup: str) -> None:
        if self._mid_line:
            self.console.print()
            self._mid_line = False
        self.console.print(markup, highlight=False)

    def feed(self, chunk: dict[str, Any]) -> None:
        kind = chunk.get("type") or ""
        if kind.startswith(("text-", "reasoning-")) or kind == "finish":
            self._text(kind, chunk)
        elif kind.startswith("tool-"):
            self._tool(kind, chunk)
        elif kind in CITED_TYPES:  # what the answer cites, a file the model made: named, never base64
            self._line(f"[dim]{_escape(f'[{cited_line(chunk)}]')}[/]")
        elif kind == "error":
            self.failed = True
            self._line(f"[red]error:[/] {_escape(chunk.get('errorText', ''))}{_escape(self.endpoint)}")
        elif kind == "abort":
            self._line("[yellow](stopped)[/]")
        elif kind == "data-think-retry":
            self._line(f"[yellow]… {_escape(retry_line(chunk.get('data') or {}))}[/]")

    def _text(self, kind: str, chunk: dict[str, Any]) -> None:
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
        elif kind in ("reasoning-end", "text-end", "finish") and self._mid_line:
            self.console.print()
            self._mid_line = False

    def _tool(self, kind: str, chunk: dict[str, Any]) -> None:
        call_id = chunk["toolCallId"]
        if kind == "tool-input-start":
            self.tool_names[call_id] = chunk["toolName"]
        elif kind == "tool-input-available":
            self.tool_names[call_id] = chunk["toolName"]
            self.inputs[call_id] = chunk.get("input")
            self._line(f"[cyan]→ {chunk['toolName']}[/] [dim]{_escape(_short(chunk.get('input')))}[/]")
        elif kind == "tool-output-available":
            self._tool_output(chunk)
        elif kind == "tool-output-error":
            name = self.tool_names.get(call_id, "tool")
            self._line(f"[red]✗ {name}[/] {_escape(chunk.get('errorText', ''))}")
        elif kind == "tool-approval-request":
            reason = chunk.get("reason")
            self.approvals.append(
                (call_id, self.tool_names.get(call_id, "tool"), self.inputs.get(call_id), reason if isinstance(reason, str) else None)
            )

    def _tool_output(self, chunk: dict[str, Any]) -> None:
        call_id = chunk["toolCallId"]
        name = self.tool_names.get(call_id, "tool")
        output = _escape(_short(chunk.get("output")))
        if chunk.get("preliminary"):
            if not self._subagent_progress(call_id, name, chunk.get("output")):
                self._line(f"[dim]… {name} {output}[/]")
            return
        decision, plugin = self.decisions.get(call_id)
        by = f" by {_escape(plugin)}" if plugin else ""
        if decision == "block":
            self._line(f"[red]⊘ {name} blocked{by}:[/] {output}")
        elif decision == "substitute":
            self._line(f"[magenta]↺ {name} substituted{by} (not run)[/] {output}")
        else:
            self._line(f"[green]← {name}[/] {output}")


    def _subagent_progress(self, call_id: str, name: str, output: Any) -> bool:
        """A sub-agent's progress (``agent.as_tool``): show what is new since its last update —
        the text it added, its tool calls that started or ended. ``False``: not a sub-agent's."""
        if not (isinstance(output, dict) and "session_id" in output and "status" in output):
            return False
        if output["status"] != "running":
            return True  # its last update is its result, shown next
        shown_text, shown_tools = self.progress.get(call_id, ("", []))
        text, tools = str(output.get("text") or ""), list(output.get("tools") or [])
        added = text[len(shown_text):] if text.startswith(shown_text) else text
        if added.strip():
            self._line(f"[dim]… {_escape(name)}: {_escape(_short(added.strip()))}[/]")
        for i, call in enumerate(tools):
            if isinstance(call, dict) and (i >= len(shown_tools) or shown_tools[i] != call):
                self._line(f"[dim]… {_escape(name)} → {_escape(str(call.get('tool')))} {_escape(str(call.get('state')))}[/]")
        self.progress[call_id] = (text, tools)
        return True


def retry_line(data: dict[str, Any]) -> str:
    """``retrying in 2.0 s after 429 (attempt 1): openai HTTP 429: Rate limit reached``; after a
    fallback, ``retrying on anthropic:claude-sonnet-4-5 after 503 (attempt 1): ...``."""
    cause = data.get("status") or data.get("classification") or "an error"
    when = f"on {data['model']}" if data.get("model") else f"in {float(data.get('delay') or 0):.1f} s"
    text = f"retrying {when} after {cause} (attempt {data.get('attempt', 1)})"
    return f"{text}: {data['error']}" if data.get("error") else text


class DecisionLog:
    """A plugin recording each tool call's ``before_tool_call`` decision and who made it, so
    the terminal can tell a blocked call or a cached answer from a tool that ran. It runs
    first among ``after_tool_call`` observers, before the call's result reaches the printer."""

    name = "think_chat_decisions"

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, str | None]] = {}

    @hookimpl(tryfirst=True)
    def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        if len(self._seen) > 10_000:  # a long session: forget the oldest calls
            self._seen.pop(next(iter(self._seen)))
        self._seen[ctx.tool_call_id] = (ctx.decision, ctx.decided_by)

    def get(self, call_id: str) -> tuple[str, str | None]:
        return self._seen.get(call_id, ("allow", None))


def _file_label(part: dict[str, Any]) -> str:
    return f"{part.get('filename') or 'a file'} ({part.get('mediaType')})"


def _has_files(value: Any) -> bool:
    """A tool output of text and file items (what a tool returning ``File`` gives)."""
    items = value if isinstance(value, list) else []
    return any(isinstance(v, dict) and v.get("type") == "file" for v in items) and all(isinstance(v, dict) for v in items)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class ChatREPL:
    """The read-eval-print loop. ``read_line`` returns ``None`` at end of input and raises
    :class:`Interrupted` on Ctrl-C."""

    def __init__(
        self,
        session: Session,
        console: Any,
        read_line: Callable[[str], Awaitable[str | None]],
        decisions: DecisionLog | None = None,
        endpoint: str = "",
    ) -> None:
        self.session = session
        self.console = console
        self.read_line = read_line
        self.decisions = decisions
        self.endpoint = endpoint
        #: The files ``/attach`` read, sent with the next message.
        self.attached: list[dict[str, Any]] = []

    async def run(self) -> int:
        self.console.print(f"[bold]think chat[/] — session [b]{_escape(self.session.id)}[/]. {HELP}", highlight=False)
        interrupted = False
        while True:
            try:
                line = await self.read_line("you> ")
            except Interrupted:
                if interrupted:
                    self.console.print()
                    return 0
                interrupted = True
                self.console.print("\n[dim](Ctrl-C again or Ctrl-D to quit)[/]")
                continue
            interrupted = False
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
        elif name == "/attach":
            self.attach(text[len(name):].strip())
        elif name == "/help":
            self.console.print(HELP, highlight=False)
        else:
            self.console.print(f"[red]unknown command {_escape(name)}[/] — {HELP}", highlight=False)
        return True

    def attach(self, path: str) -> None:
        if not path:
            names = ", ".join(f["filename"] for f in self.attached) or "none"
            self.console.print(f"usage: /attach PATH  (attached for the next message: {_escape(names)})", highlight=False)
            return
        try:
            part = file_part(path)
        except OSError as exc:
            self.console.print(f"[red]cannot attach {_escape(path)}:[/] {_escape(exc.strerror or str(exc))}", highlight=False)
            return
        self.attached.append(part)
        encoded = part["url"].partition(",")[2]
        size = len(encoded) * 3 // 4 - encoded[-2:].count("=")
        self.console.print(
            f"[dim]attached {_escape(part['filename'])} ({part['mediaType']}, {size:,} bytes): "
            "sent with your next message[/]",
            highlight=False,
        )

    async def show_history(self) -> None:
        messages = await self.session.messages()
        if not messages:
            self.console.print("[dim](no messages)[/]")
        for message in messages:
            if message.role != "assistant":
                self.console.print(f"[bold blue]{message.role}[/]: {_escape(message.text)}", highlight=False)
                for part in message.parts:
                    if part.get("type") == "file":
                        self.console.print(f"  [dim]attached {_escape(_file_label(part))}[/]", highlight=False)
            else:
                self.console.print("[bold green]assistant[/]:", highlight=False)
                for number, step in enumerate(split_steps(message.parts), start=1):
                    self.console.print(f"  [dim]step {number}[/]", highlight=False)
                    for part in step:
                        self._history_part(part)
            for line in outcome_lines(message.metadata):  # stopped, or the failed turn's error
                self.console.print(f"  [red]{_escape(line)}[/]", highlight=False)

    def _history_part(self, part: dict[str, Any]) -> None:
        kind = part.get("type")
        if kind == "text" and part.get("text"):
            self.console.print(f"    {_escape(part['text'])}", highlight=False)
        elif kind == "reasoning" and part.get("text"):
            self.console.print(f"    [dim](thinking) {_escape(part['text'])}[/]", highlight=False)
        elif kind in CITED_TYPES:
            self.console.print(f"    [dim]{_escape(f'[{cited_line(part)}]')}[/]", highlight=False)
        elif is_tool_part(part):
            state: ToolPartState | None = part.get("state")
            outcome = part.get("output") if state == "output-available" else part.get("errorText") or state
            self.console.print(
                f"    [cyan]{tool_name_of(part)}[/] {_escape(_short(part.get('input')))} → {_escape(_short(outcome))}",
                highlight=False,
            )

    async def turn(self, text: str) -> None:
        printer = ChunkPrinter(self.console, self.decisions, self.endpoint)
        message: str | dict[str, Any] = message_with_files(text, self.attached) if self.attached else text
        self.attached = []
        try:
            chunks = self.session.stream(message)
            first = await anext(chunks, None)  # a refused file is refused here, before anything is stored
        except InvalidAttachment as exc:
            self.console.print(f"[red]not sent:[/] {_escape(str(exc))}", highlight=False)
            return
        self.console.print("[bold green]agent>[/] ", end="")
        if first is not None:
            printer.feed(first)
        async for chunk in chunks:
            printer.feed(chunk)
        while printer.approvals:
            pending, printer.approvals = printer.approvals, []
            decided = await self._stored_decisions()
            for index, (call_id, name, tool_input, reason) in enumerate(pending):
                asker = decided.get(call_id, {}).get("by") if decided.get(call_id, {}).get("decision") == "ask" else None
                if reason or asker:  # a plugin asked (before_tool_call's ask): say which, and why
                    self.console.print(f"[yellow]asked{' by ' + _escape(asker) if asker else ''}:[/] "
                                       f"{_escape(reason or '')}", highlight=False)
                try:
                    answer = await self.read_line(f"allow {name}({_short(tool_input)})? [y/N] ")
                except Interrupted:
                    answer = None
                    self.console.print()
                approved = (answer or "").strip().lower() in ("y", "yes")
                if not approved:
                    self.console.print(f"[dim]{name}: denied[/]")
                # The batch continues once its last approval is answered.
                await self.session.approve_tool_call(
                    call_id, approved, auto_continue=index == len(pending) - 1, on_event=printer.feed
                )
        await self._shaped_by()

    async def _stored_decisions(self) -> dict[str, dict[str, Any]]:
        """The decisions the latest stored answer records (who asked, who rewrote a result)."""
        answers = [m for m in await self.session.messages() if m.role == "assistant"]
        return stored_decisions(answers[-1].metadata) if answers else {}

    async def _shaped_by(self) -> None:
        """Which plugins shaped the answer just shown (``transform_stream``, ``transform_tool_result``)."""
        messages = await self.session.messages()
        if not messages or messages[-1].role != "assistant":
            return  # this turn stored no answer: nothing of an earlier one is shown again
        answer = messages[-1]
        names = {p.get("toolCallId"): tool_name_of(p) for p in answer.parts if is_tool_part(p)}
        for call_id, decided in stored_decisions(answer.metadata).items():
            rewritten = decided.get("rewrittenBy") if isinstance(decided, dict) else None
            if rewritten:
                self.console.print(f"[dim]({_escape(names.get(call_id, 'tool'))} result rewritten by "
                                   f"{_escape(', '.join(map(str, rewritten)))})[/]", highlight=False)
        shaped = (answer.metadata or {}).get("transformedBy")
        if isinstance(shaped, list) and shaped:
            self.console.print(f"[dim](answer shaped by {_escape(', '.join(map(str, shaped)))})[/]", highlight=False)


async def run(args: argparse.Namespace) -> int:
    try:
        from rich.console import Console
    except ImportError:
        print("think chat: needs rich; pip install 'think-agent[cli]'", file=sys.stderr)
        return 2
    try:
        agent = agent_from_args(args)
        quiet_turn_failures(args)
    except ConfigurationError as exc:
        print(f"think: {exc}", file=sys.stderr)
        return 2
    decisions = DecisionLog()
    agent.plugin_manager.register(decisions, name=decisions.name)
    console = Console()
    session = agent.session(args.session)
    try:
        with Terminal(lambda prompt: console.print(prompt, end="", markup=False, highlight=False)) as terminal:
            # Ctrl-C outside a prompt stops what is streaming: the partial reply is kept.
            terminal.on_interrupt = session.cancel_all
            return await ChatREPL(session, console, terminal.read_line, decisions, endpoint_note(agent)).run()
    finally:
        await agent.aclose()
