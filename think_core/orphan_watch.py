"""Watching, for the sessions a process has open, the submissions other owners hold.

A session's drain only runs while the session has unfinished submissions it knows of. Another
process may accept and start one later, and die: the :class:`OrphanWatch` of every process
that has the session open notices it. Every :data:`~think_core.submissions.OWNER_CHECK`
seconds it reads the running submissions of the store (one query for all sessions) and resumes
the drain of an open session when one of them is orphaned — its owner's lease expired, or its
owner was a process on this host that is gone — or when the session's pending submissions
have no running one ahead of them for two looks in a row (their owner died before claiming
them). The drain then retakes and runs them, in order.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Iterable

from .process_identity import this_process
from .store import AsyncStore
from .submission_recovery import is_orphaned, lease_expiry
from .submissions import OWNER_CHECK

__all__ = ["OrphanWatch"]

logger = logging.getLogger("think.submissions")


class OrphanWatch:
    """Resumes the drain of an open session whose submissions another owner left behind.

    :param open_sessions: the ids of the sessions open in this process now.
    :param resume: starts the drain of one of them.
    """

    def __init__(
        self,
        db: AsyncStore,
        *,
        lease: float,
        open_sessions: Callable[[], Iterable[str]],
        resume: Callable[[str], None],
        interval: float = OWNER_CHECK,
    ) -> None:
        self._db = db
        self._lease = lease
        self._open_sessions = open_sessions
        self._resume = resume
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self._waiting: set[str] = set()  # pending with nothing running ahead, at the last look
        self._next_expiry = float("inf")  # the earliest lease another owner holds in an open session

    def start(self) -> None:
        """Start watching (once; a store no other process can reach needs no watching)."""
        if self._task is None and not getattr(self._db.sync, "in_memory", False):
            self._task = asyncio.get_running_loop().create_task(
                self._watch(), name="think-orphan-watch", context=contextvars.Context()
            )

    async def _watch(self) -> None:
        while True:
            # Wake at the next look, or right as a watched lease expires if that comes first.
            await asyncio.sleep(max(0.01, min(self._interval, self._next_expiry - time.time() + 0.01)))
            if self._db.closed:  # the agent was closed without aclose()
                return
            try:
                await self.look()
            except asyncio.CancelledError:
                raise
            except Exception:  # a locked or briefly unreachable database: look again later
                logger.warning("looking for orphaned submissions failed; trying again", exc_info=True)

    async def look(self) -> list[str]:
        """One look: resume the open sessions that need it; returns their ids."""
        watched = set(self._open_sessions())
        self._next_expiry = float("inf")
        if not watched:
            self._waiting.clear()
            return []
        running = await self._db.running_submissions()
        me, now, here = self._db.sync.submission_owner(), time.time(), this_process()
        due: set[str] = set()
        for row in running:
            if row.session_id not in watched or (row.owner is not None and row.owner.id == me.id):
                continue
            if is_orphaned(row, me, default_lease=self._lease, now=now, here=here):
                due.add(row.session_id)
            else:
                self._next_expiry = min(self._next_expiry, lease_expiry(row, self._lease))
        busy = {row.session_id for row in running}
        waiting = {sid for sid in await self._db.pending_session_ids() if sid in watched and sid not in busy}
        due |= waiting & self._waiting
        self._waiting = waiting
        for session_id in sorted(due):
            self._resume(session_id)
        return sorted(due)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
