"""Plugin call tracing: ``THINK_TRACE_PLUGINS=1`` logs every hook implementation call — hook,
plugin, result kind, duration including the await — at INFO on ``think.plugins.trace``.

The dispatcher wraps each implementation once, when its call plan is built, so the call loop
itself never asks whether it is traced.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["traced_call", "tracing_enabled"]

trace_logger = logging.getLogger("think.plugins.trace")


def tracing_enabled() -> bool:
    """``THINK_TRACE_PLUGINS`` asks for a log line per hook implementation call."""
    return os.environ.get("THINK_TRACE_PLUGINS", "").strip().lower() in {"1", "true", "yes", "on"}


def _result_kind(result: object) -> str:
    return "None" if result is None else type(result).__name__


def _trace(hook: str, plugin: str, result: str, started: float) -> None:
    duration_ms = (time.perf_counter() - started) * 1000.0
    trace_logger.info(
        "%s plugin=%s result=%s duration_ms=%.3f",
        hook,
        plugin,
        result,
        duration_ms,
        extra={"hook": hook, "plugin": plugin, "result": result, "duration_ms": duration_ms},
    )


def traced_call(hook: str, plugin: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, logging each call with its result kind and duration. A sync result is
    traced at once; an awaitable one when it has been awaited (so the duration includes it)."""

    async def finish(awaitable: Any, started: float) -> Any:
        try:
            result = await awaitable
        except BaseException as exc:  # traced, then re-raised untouched
            _trace(hook, plugin, f"raised {type(exc).__name__}", started)
            raise
        _trace(hook, plugin, _result_kind(result), started)
        return result

    def traced(*args: Any) -> Any:
        started = time.perf_counter()
        try:
            result = function(*args)
        except BaseException as exc:  # traced, then re-raised untouched
            _trace(hook, plugin, f"raised {type(exc).__name__}", started)
            raise
        if inspect.isawaitable(result):
            return finish(result, started)
        _trace(hook, plugin, _result_kind(result), started)
        return result

    return traced
