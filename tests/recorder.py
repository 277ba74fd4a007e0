"""A plugin that records every hook call, for tests that assert hook order."""

from __future__ import annotations

from typing import Any

from think_core import hookimpl


class Recorder:
    """Records ``(hook, detail)`` for every hook; ``on_chunk`` records the chunk type."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.contexts: dict[str, list[Any]] = {}

    def _record(self, hook: str, detail: Any, ctx: Any) -> None:
        self.calls.append((hook, detail))
        self.contexts.setdefault(hook, []).append(ctx)

    def names(self, *, chunks: bool = False) -> list[str]:
        return [h for h, _ in self.calls if chunks or h != "on_chunk"]

    @hookimpl
    def configure_session(self, session):
        self._record("configure_session", session.id, session)

    @hookimpl
    def before_turn(self, ctx):
        self._record("before_turn", (ctx.trigger, ctx.continuation), ctx)

    @hookimpl
    def before_step(self, ctx):
        self._record("before_step", ctx.step_number, ctx)

    @hookimpl
    def on_chunk(self, ctx):
        self._record("on_chunk", ctx.chunk.type, ctx)

    @hookimpl
    def before_tool_call(self, ctx):
        self._record("before_tool_call", ctx.tool_name, ctx)

    @hookimpl
    def after_tool_call(self, ctx):
        self._record("after_tool_call", ctx.tool_name, ctx)

    @hookimpl
    def on_step_finish(self, ctx):
        self._record("on_step_finish", ctx.step_number, ctx)

    @hookimpl
    def on_chat_response(self, result):
        self._record("on_chat_response", result.status, result)

    @hookimpl
    def on_chat_error(self, error, ctx):
        self._record("on_chat_error", ctx.stage, ctx)

    @hookimpl
    def classify_chat_error(self, error, ctx):
        self._record("classify_chat_error", ctx.stage, ctx)
