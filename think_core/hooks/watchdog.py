"""Noticing sync hook implementations that block the event loop.

A plain ``def`` implementation runs on the event loop: while it blocks (a blocking HTTP call,
``time.sleep``), every session of the process stalls. The dispatcher times each sync call with
``time.perf_counter`` (no thread, no per-call allocation beyond the two readings) and hands
the ones that ran longer than :data:`SLOW_SYNC_HOOK` to :class:`BlockingWatch`, which warns once
per plugin and hook, so a hot hook does not flood the log.
"""

from __future__ import annotations

import logging

from .specs import SYNC_ONLY_HOOKS

__all__ = ["SLOW_SYNC_HOOK", "BlockingWatch"]

logger = logging.getLogger("think.plugins")

#: Seconds a sync implementation may hold the event loop before think warns about it.
SLOW_SYNC_HOOK = 0.1


class BlockingWatch:
    """Warns once per (plugin, hook) that a sync implementation blocked the event loop."""

    def __init__(self) -> None:
        self._warned: set[tuple[str, str]] = set()

    def blocked(self, plugin: str, hook: str, seconds: float) -> None:
        """``plugin``'s sync ``hook`` held the event loop for ``seconds``."""
        key = (plugin, hook)
        if key in self._warned:
            return
        self._warned.add(key)
        why_sync = SYNC_ONLY_HOOKS.get(hook)
        advice = (
            f"{hook} must stay a plain def: {why_sync}"
            if why_sync is not None
            else "make it 'async def', or move the blocking work to 'await asyncio.to_thread(...)'"
        )
        logger.warning(
            "plugin %r blocked the event loop for %.2fs in its sync %s (every session stalls meanwhile); %s",
            plugin,
            seconds,
            hook,
            advice,
            extra={"plugin": plugin, "hook": hook, "blocked_seconds": seconds},
        )
