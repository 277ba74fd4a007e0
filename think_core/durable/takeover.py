"""Taking over sessions nobody in this process has open, a few at a time.

When a server dies, the sessions it was answering are open nowhere else: the
:class:`~think_core.durable.orphan_watch.OrphanWatch` of every living process that recovers finds them
in the store and hands them to its :class:`Takeovers`, which opens some of them and lets each
one's drain retake and answer what was left. The drain's retake is a compare-and-set on the
row's owner and last heartbeat under the session's write lock (PostgreSQL: an advisory lock;
SQLite: the file's write lock), and a pending row is claimed by exactly one process, so when two
processes go for the same session one of them runs each submission and the other's drain only
waits for it to end.

How many at a time: at most ``limit`` in flight, fewer while this process runs turns of its
own, but always one when none is in flight, so orphans are never left waiting for an idle
server. Which ones: a random sample of those due, so that the living servers, each sampling on
its own, spread the sessions between them rather than all going for the oldest ones first.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import random
from collections.abc import Callable, Sequence
from typing import Protocol

__all__ = ["Drainable", "Takeovers", "drain"]

logger = logging.getLogger("think.agent")


class Drainable(Protocol):
    """What a takeover does with a session (a :class:`~think_core.session.Session`)."""

    async def open(self) -> object: ...
    def resume_submissions(self) -> None: ...
    async def submissions_drained(self) -> None: ...


async def drain(session_id: str, session: Callable[[str], Drainable]) -> None:
    """Open the session and wait until its drain has nothing left to do. A failure is logged,
    not raised: one session that cannot open must not stop the others."""
    try:
        opened = session(session_id)
        await opened.open()
        opened.resume_submissions()
        await opened.submissions_drained()
    except Exception:
        logger.exception("recovering the submissions of session %r failed", session_id)


class Takeovers:
    """The sessions this process is taking over.

    :param session: the session of an id (opened and drained by the takeover).
    :param limit: takeovers in flight at most.
    :param busy: turns this process runs now (a busy process takes fewer).
    """

    def __init__(self, session: Callable[[str], Drainable], *, limit: int, busy: Callable[[], int]) -> None:
        self._session = session
        self._limit = limit
        self._busy = busy
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def in_flight(self) -> list[str]:
        return list(self._tasks)

    def budget(self) -> int:
        """How many more sessions to take now."""
        room = self._limit - max(len(self._tasks), self._busy())
        return max(room, 0 if self._tasks else 1)

    def take(self, session_ids: Sequence[str]) -> list[str]:
        """Start taking over a random sample of ``session_ids`` (those not taken already), as
        many as :meth:`budget` allows; returns the ones started."""
        candidates = [sid for sid in dict.fromkeys(session_ids) if sid not in self._tasks]
        chosen = random.sample(candidates, min(len(candidates), self.budget()))
        loop = asyncio.get_running_loop()
        for session_id in chosen:
            task = loop.create_task(
                drain(session_id, self._session), name=f"think-takeover-{session_id}", context=contextvars.Context()
            )
            self._tasks[session_id] = task
            task.add_done_callback(functools.partial(self._done, session_id))
        return chosen

    def _done(self, session_id: str, _: asyncio.Task[None]) -> None:
        self._tasks.pop(session_id, None)

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
