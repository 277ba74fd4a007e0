"""The ``analytics`` plugin: records data points from the hooks and hands them to its sink."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import Any

from think_core import (
    ChatResponseResult,
    SessionView,
    StepContext,
    StepResult,
    ToolCallResultContext,
    TurnContext,
    hookimpl,
)

from . import report
from .settings import AnalyticsSettings
from .sinks import DataPoint, Sink, build_sink

__all__ = ["Analytics"]

logger = logging.getLogger("think.plugins.analytics")

_MAX_OPEN_TURNS = 1024  # per session: start times of turns that never reached on_chat_response


def _outcome(ctx: ToolCallResultContext) -> str:
    if ctx.decision == "block":
        return "blocked"
    if ctx.decision == "substitute":
        return "substituted"
    return "executed" if ctx.success else "failed"


def _json_size(value: Any) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return len(repr(value))


class Analytics:
    """Records data points and hands them to a sink (see the module docstring).

    :param settings: :class:`AnalyticsSettings` or a dict of its fields. Settings given here win:
        the instance then ignores ``Think(settings={"analytics": ...})``. Built without them (as
        the entry-point loader does), it is configured from that section.
    :param sink: a sink object to use instead of the one the settings name.
    """

    name = "analytics"
    #: read by the plugin loader: ``Think(settings={name: {...}})`` is validated with it
    settings_model: type[AnalyticsSettings] = AnalyticsSettings

    def __init__(
        self,
        settings: AnalyticsSettings | Mapping[str, Any] | None = None,
        *,
        sink: Sink | None = None,
    ) -> None:
        self._custom_sink = sink
        self._queue: deque[DataPoint] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._overflowing = False
        #: points dropped: queue overflow, or a sink that failed to write them
        self.dropped = 0
        #: points a sink accepted
        self.written = 0
        self.settings = (
            settings
            if isinstance(settings, AnalyticsSettings)
            else AnalyticsSettings.model_validate(settings or {})
        )

    @property
    def settings(self) -> AnalyticsSettings:
        return self._settings

    @settings.setter
    def settings(self, value: AnalyticsSettings) -> None:
        """Assigning settings (as the entry-point loader does) picks the sink they name."""
        self._settings = value
        self.sink: Sink = self._custom_sink or build_sink(value)

    # -- recording ----------------------------------------------------------------------------
    def _starts(self, session: SessionView) -> OrderedDict[str, float]:
        return session.state_for(self).setdefault("starts", OrderedDict())

    def _seen(self, session: SessionView, request_id: str) -> None:
        """Note the first time this request shows up (the start of its latency)."""
        starts = self._starts(session)
        if request_id not in starts:
            starts[request_id] = time.perf_counter()
            while len(starts) > _MAX_OPEN_TURNS:
                starts.popitem(last=False)

    def _record(self, kind: Any, request_id: str, session_id: str, blobs: list[str], doubles: list[float]) -> None:
        point = DataPoint(
            kind=kind, timestamp=time.time(), request_id=request_id, blobs=blobs,
            doubles=[float(d) for d in doubles], indexes=[session_id],
        )
        if len(self._queue) >= self.settings.max_queue:
            self._queue.popleft()
            self.dropped += 1
            if not self._overflowing:
                self._overflowing = True
                logger.warning(
                    "analytics: queue full (%d points); dropping the oldest points",
                    self.settings.max_queue,
                )
        self._queue.append(point)
        if self.sink.background and len(self._queue) >= self.settings.batch_size:
            self._flush_in_background()

    # -- hooks --------------------------------------------------------------------------------
    @hookimpl
    def register_commands(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Add ``think analytics report`` to the command line."""
        report.register(subparsers)

    @hookimpl(tryfirst=True)
    def before_turn(self, ctx: TurnContext) -> None:
        """Observe only (returns ``None``): the start of the turn's latency."""
        self._seen(ctx.session, ctx.request_id)
        return None

    @hookimpl(tryfirst=True)
    def before_step(self, ctx: StepContext) -> None:
        """Observe only: the latency start when ``before_turn`` was hidden by another plugin."""
        self._seen(ctx.session, ctx.request_id)
        return None

    @hookimpl
    def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        try:
            self._seen(ctx.session, ctx.request_id)
            shown = ctx.output if ctx.success else ctx.error
            self._record(
                "tool_call", ctx.request_id, str(ctx.session.id),
                [ctx.tool_name, _outcome(ctx)], [_json_size(shown), ctx.duration_ms],
            )
        except Exception:
            logger.exception("analytics: could not record a tool call")

    @hookimpl
    def on_step_finish(self, ctx: StepResult) -> None:
        try:
            self._seen(ctx.session, ctx.request_id)
            u = ctx.usage
            self._record(
                "step", ctx.request_id, str(ctx.session.id),
                [ctx.finish_reason or "", ctx.model_id or ""],
                [u.input_tokens, u.output_tokens, u.total_tokens, u.reasoning_tokens,
                 u.cached_input_tokens, ctx.step_number],
            )
        except Exception:
            logger.exception("analytics: could not record a step")

    @hookimpl
    async def on_chat_response(self, result: ChatResponseResult) -> None:
        try:
            started = self._starts(result.session).pop(result.request_id, None)
            latency = -1.0 if started is None else (time.perf_counter() - started) * 1000.0
            u = result.usage
            self._record(
                "turn", result.request_id, str(result.session.id),
                [result.status, (result.error or "")[:500]],
                [latency, u.input_tokens, u.output_tokens, u.total_tokens],
            )
        except Exception:
            logger.exception("analytics: could not record a turn")
        # Never on the turn's path: a slow or locked sink must not delay the caller.
        self._flush_in_background()

    # -- delivery -----------------------------------------------------------------------------
    def _flush_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    def _flush_in_background(self) -> None:
        """Start a flush task unless one is running and another is already waiting for it."""
        pending = [task for task in self._tasks if not task.done()]
        if len(pending) >= 2:
            return
        task = asyncio.get_running_loop().create_task(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def queued(self) -> int:
        """Points waiting for the sink."""
        return len(self._queue)

    async def flush(self) -> None:
        """Hand every queued point to the sink, batch by batch.

        A batch the sink fails to write is dropped with a logged warning and this pass stops;
        points queued behind it wait for the next flush (so a dead collector costs one retry
        cycle per flush, not one per batch). Never raises for a sink failure.
        """
        async with self._flush_lock():
            while self._queue:
                size = min(self.settings.batch_size, len(self._queue))
                batch = [self._queue.popleft() for _ in range(size)]
                self._overflowing = False
                try:
                    await self.sink.write(batch)
                except Exception as exc:
                    self.dropped += len(batch)
                    logger.warning(
                        "analytics: dropped %d data point(s): %s sink failed: %s",
                        len(batch), type(self.sink).__name__, f"{type(exc).__name__}: {exc}",
                    )
                    return
                self.written += len(batch)

    async def drain(self) -> None:
        """Wait for background flushes and deliver what is queued (e.g. before reading the sink)."""
        while pending := [task for task in self._tasks if not task.done()]:
            await asyncio.gather(*pending, return_exceptions=True)
        await self.flush()

    async def aclose(self) -> None:
        """Deliver what is left (once), then close the sink. ``await agent.aclose()`` calls it."""
        await self.drain()
        if self._queue:
            self.dropped += len(self._queue)
            logger.warning("analytics: dropped %d undelivered data point(s) at close", len(self._queue))
            self._queue.clear()
        await self.sink.aclose()
