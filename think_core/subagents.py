"""Sub-agents: another agent's turn as a tool of this one (``agent.as_tool(name, description)``).

A call of the tool runs one turn of the child agent in a child session linked to the call:

* **linked**: the child session's id names the parent's session, the tool and the call
  (:func:`child_session_id`); the child's user message carries the parent's ids in its metadata
  (``metadata["parent_call"]``), and so does its turn's body (``body["parent_call"]``, which the
  OTel plugin reads to put the child's turn span under the parent's tool span); the parent's tool
  result names the child session.
* **streamed**: the child's progress (its text so far, its tool calls) is the call's
  preliminary results, shown in the parent's tool card as it happens.
* **cancelled with the parent**: the child's turn runs in a task the call owns; when the parent's
  turn is cancelled the call is, and it cancels the child's turn (stored as aborted).
* **usage rolled up**: the child turn's usage counts in the parent's step and turn.
* **the parent's guards kept**: by default the parent agent's plugins are registered in the
  child agent (once each; under ``"<name>@caller"`` when the child has a plugin of that name
  already, so both run), and the child's turn gets the parent's body — a read-only guard, a budget
  or a client's ``{"read_only": true}`` cannot be bypassed by delegating.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from .events import Usage
from .mcp import MCPTools
from .messages import user_message
from .tools import AnyTool, ToolContext, tool
from .types import TurnResult, UIMessage

__all__ = ["PARENT_CALL_KEY", "ChildAgent", "child_session_id", "subagent_tool"]

#: The key of the child's user message metadata and turn body that links it to the parent's call.
PARENT_CALL_KEY = "parent_call"

#: Progress chunks of the child's stream that make a new preliminary result.
_PROGRESS_CHUNKS = frozenset({"text-end", "tool-input-available", "tool-output-available", "tool-output-error"})

#: Session ids longer than this are shortened (the server takes at most 256 characters).
_MAX_SESSION_ID = 200


class _ChildSession(Protocol):
    async def chat(
        self,
        input: UIMessage,
        *,
        body: dict[str, Any] | None = ...,
        on_event: Callable[[dict[str, Any]], Any] | None = ...,
        request_id: str | None = ...,
    ) -> TurnResult: ...


class _PluginManager(Protocol):
    def is_registered(self, plugin: object) -> bool: ...
    def has_plugin(self, name: str) -> bool: ...
    def register(self, plugin: object, name: str | None = None) -> str | None: ...


class ChildAgent(Protocol):
    """What a sub-agent tool needs of the agent it runs (a :class:`~think_core.Think`)."""

    @property
    def plugin_manager(self) -> _PluginManager: ...
    @property
    def borrowed_plugins(self) -> list[object]: ...
    def session(self, session_id: str) -> Any: ...


def child_session_id(parent_session_id: str, tool_name: str, tool_call_id: str) -> str:
    """The child session of one call: the same for the same call (a call run again after a crash
    continues in it), readable when short, hashed when it would be too long."""
    sid = f"{parent_session_id}:{tool_name}:{tool_call_id}"
    if len(sid) <= _MAX_SESSION_ID:
        return sid
    return f"{tool_name[:64]}:{hashlib.sha256(sid.encode()).hexdigest()[:40]}"


def subagent_tool(
    child: ChildAgent,
    name: str,
    description: str,
    *,
    inherit_plugins: bool = True,
    read_only: bool = False,
) -> AnyTool:
    """The tool that runs ``child``'s turn for the ``task`` the model gives (see the module)."""

    async def run_subagent(task: str, ctx: ToolContext) -> AsyncIterator[dict[str, Any]]:
        if inherit_plugins:
            load_caller_plugins(child, ctx.plugins)
        sid = child_session_id(ctx.session_id, name, ctx.tool_call_id)
        link = {
            "session_id": ctx.session_id,
            "request_id": ctx.request_id,
            "tool_call_id": ctx.tool_call_id,
            "tool_name": ctx.tool_name,
        }
        progress = _Progress(sid)
        session = child.session(sid)
        message = user_message(task, metadata={PARENT_CALL_KEY: link})
        body = {**(ctx.body or {}), PARENT_CALL_KEY: link}
        turn = asyncio.ensure_future(session.chat(message, body=body, on_event=progress.chunk))
        try:
            async for update in progress.updates(turn):
                yield update
            result = turn.result()
        finally:
            if not turn.done():  # the parent's turn was cancelled (or the consumer closed us)
                turn.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await turn
        if result.usage != Usage():
            ctx.add_usage(result.usage)
        if result.status == "error":
            raise RuntimeError(f"sub-agent {name!r} failed: {result.error or 'no reason given'}")
        yield {"session_id": sid, "status": result.status, "text": result.text, "tools": progress.snapshot()["tools"]}

    run_subagent.__doc__ = description
    return tool(run_subagent, name=name, description=description, read_only=read_only)


def load_caller_plugins(child: ChildAgent, plugins: dict[str, Any]) -> None:
    """Register the caller's plugins in ``child`` (each object once; the caller still owns them:
    closing the child does not close them)."""
    pm = child.plugin_manager
    for plugin_name, plugin in plugins.items():
        if isinstance(plugin, MCPTools) or pm.is_registered(plugin):
            continue  # the caller's MCP servers are its tools, not a guard
        pm.register(plugin, plugin_name if not pm.has_plugin(plugin_name) else f"{plugin_name}@caller")
        child.borrowed_plugins.append(plugin)


class _Progress:
    """The child's stream turned into preliminary results: its text so far and its tool calls."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.text: list[str] = []
        self.tools: dict[str, dict[str, Any]] = {}
        self._changed = asyncio.Event()

    def chunk(self, chunk: dict[str, Any]) -> None:
        kind, call_id = chunk.get("type"), str(chunk.get("toolCallId"))
        if kind == "text-delta":
            self.text.append(str(chunk.get("delta", "")))
        elif kind == "tool-input-available":
            self.tools[call_id] = {"tool": chunk.get("toolName"), "state": "running"}
        elif kind in ("tool-output-available", "tool-output-error") and call_id in self.tools:
            if not chunk.get("preliminary"):
                self.tools[call_id]["state"] = "done" if kind == "tool-output-available" else "error"
        if kind in _PROGRESS_CHUNKS:
            self._changed.set()

    def snapshot(self) -> dict[str, Any]:
        # Copies: a preliminary result is kept as it was when it streamed.
        return {"session_id": self.session_id, "status": "running", "text": "".join(self.text),
                "tools": [dict(t) for t in self.tools.values()]}

    async def updates(self, turn: asyncio.Future[TurnResult]) -> AsyncIterator[dict[str, Any]]:
        """A snapshot each time the child's progress changed, until its turn ends."""
        while not turn.done():
            changed: asyncio.Future[Any] = asyncio.ensure_future(self._changed.wait())
            waiting: set[asyncio.Future[Any]] = {turn, changed}
            try:
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
            if self._changed.is_set():
                self._changed.clear()
                yield self.snapshot()
