"""A server-side plugin that reports each turn's hook timeline to the chat page.

Seeing which hooks fired, in which order, and what each tool-call decision was (allowed,
blocked, substituted by a cache) is the point of a hook-based engine, so the built-in page
shows it next to the conversation. The recorder only observes: its decision hooks run first
(``tryfirst``) and always return ``None``, so they never change what other plugins decide, and
it never raises into a turn.

Events are plain dicts ``{"hook", "t_ms", ...details}`` where ``t_ms`` is the time since the
turn's ``before_turn``; they are handed to ``sink(session_id, request_id, event)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..hooks.markers import hookimpl

logger = logging.getLogger("think.server")

Sink = Callable[[str, str, dict[str, Any]], None]

#: A turn that never reaches ``on_chat_response`` must not leak its start time forever.
_MAX_OPEN_TURNS = 1024

DECISION_LABELS = {"allow": "allowed", "block": "blocked", "substitute": "substituted"}


class TimelineRecorder:
    """Observes every hook of every turn of one agent and forwards the events to ``sink``."""

    name = "think_server_timeline"

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._started: dict[str, float] = {}

    def _emit(self, session: Any, request_id: str, hook: str, **details: Any) -> None:
        started = self._started.get(request_id)
        now = time.perf_counter()
        event = {"hook": hook, "t_ms": round((now - started) * 1000.0, 2) if started is not None else 0.0, **details}
        try:
            self._sink(getattr(session, "id", str(session)), request_id, event)
        except Exception:  # observing must never break a turn
            logger.exception("timeline sink failed for hook %s", hook)

    @hookimpl(tryfirst=True)
    def before_turn(self, ctx: Any) -> None:
        if len(self._started) >= _MAX_OPEN_TURNS:
            self._started.pop(next(iter(self._started)))
        self._started[ctx.request_id] = time.perf_counter()
        self._emit(ctx.session, ctx.request_id, "before_turn", trigger=ctx.trigger, continuation=ctx.continuation, tools=sorted(ctx.tools))

    @hookimpl(tryfirst=True)
    def before_step(self, ctx: Any) -> None:
        self._emit(ctx.session, ctx.request_id, "before_step", step=ctx.step_number)

    @hookimpl(tryfirst=True)
    def before_tool_call(self, ctx: Any) -> None:
        self._emit(ctx.session, ctx.request_id, "before_tool_call", step=ctx.step_number, tool=ctx.tool_name, toolCallId=ctx.tool_call_id)

    @hookimpl
    def after_tool_call(self, ctx: Any) -> None:
        self._emit(
            ctx.session,
            ctx.request_id,
            "after_tool_call",
            step=ctx.step_number,
            tool=ctx.tool_name,
            toolCallId=ctx.tool_call_id,
            decision=ctx.decision,
            label=DECISION_LABELS.get(ctx.decision, ctx.decision),
            decidedBy=ctx.decided_by,
            success=ctx.success,
            error=ctx.error,
            duration_ms=round(ctx.duration_ms, 2),
        )

    @hookimpl
    def on_step_finish(self, ctx: Any) -> None:
        usage = ctx.usage
        self._emit(
            ctx.session,
            ctx.request_id,
            "on_step_finish",
            step=ctx.step_number,
            finish_reason=ctx.finish_reason,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
        )

    @hookimpl(tryfirst=True)
    def on_chat_error(self, error: BaseException, ctx: Any) -> Any | None:
        self._emit(ctx.session, ctx.request_id, "on_chat_error", stage=ctx.stage, classification=ctx.classification, error=str(error))
        return None

    @hookimpl
    def on_chat_response(self, result: Any) -> None:
        self._emit(result.session, result.request_id, "on_chat_response", status=result.status, continuation=result.continuation)
        self._started.pop(result.request_id, None)
