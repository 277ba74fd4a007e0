"""Watching the submissions other owners hold: for the sessions a process has open, and — once
the process recovers (``think serve``, ``recover_on_start``) — for every session of the store.

A session's drain only runs while the session has unfinished submissions it knows of. Another
process may accept and start one later, and die: the :class:`OrphanWatch` of every process
that has the session open notices it. Every :data:`~think_core.durable.queue.OWNER_CHECK`
seconds it reads the unfinished submissions of the store (one query on the index of unfinished
rows, for all sessions) and finds the sessions that need a drain: one of their running
submissions is orphaned — its owner's lease expired, or its owner was a process on this host
that is gone — or their pending submissions have no running one ahead of them for two looks in
a row (their owner died before claiming them). An open session's drain is resumed at once; the
drain then retakes and runs them, in order.

A session nobody here has open is handed to the :class:`Sweeper` instead (when the process
recovers), which opens a bounded number of them at a time: that is how a dead server's chats
are finished by the living ones although none of them had those sessions open.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..process_identity import ProcessIdentity, this_process
from ..store import AsyncStore, SubmissionOwner, UnfinishedSubmission
from .crash_recovery import is_orphaned, lease_expiry
from .queue import OWNER_CHECK

__all__ = ["Orphans", "OrphanWatch", "Sweeper", "find_orphans"]

logger = logging.getLogger("think.submissions")


class Sweeper(Protocol):
    """Takes over sessions nobody in this process has open (see :mod:`think_core.durable.takeover`)."""

    def take(self, session_ids: Sequence[str]) -> list[str]:
        """Start taking over some of ``session_ids`` (as many as this process can take now);
        returns the ones it started."""
        ...


@dataclass
class Orphans:
    """What one look found, by session."""

    #: Sessions with a running submission that may be taken over now: its row.
    orphaned: dict[str, UnfinishedSubmission] = field(default_factory=dict)
    #: Sessions with pending submissions and no running one: their first pending row.
    waiting: dict[str, UnfinishedSubmission] = field(default_factory=dict)
    #: The earliest lease another owner holds that has not expired yet.
    next_expiry: float = float("inf")


def find_orphans(
    rows: Iterable[UnfinishedSubmission],
    me: SubmissionOwner,
    *,
    lease: float,
    now: float,
    here: ProcessIdentity,
    within: set[str] | None = None,
) -> Orphans:
    """Sort the store's unfinished rows (in acceptance order) into :class:`Orphans`; only the
    sessions ``within`` when given."""
    found = Orphans()
    running: set[str] = set()
    for row in rows:
        if within is not None and row.session_id not in within:
            continue
        if row.status == "pending":
            found.waiting.setdefault(row.session_id, row)
            continue
        running.add(row.session_id)
        if row.owner is not None and row.owner.id == me.id:
            continue
        if is_orphaned(row, me, default_lease=lease, now=now, here=here):
            found.orphaned.setdefault(row.session_id, row)
        else:
            found.next_expiry = min(found.next_expiry, lease_expiry(row, lease))
    for session_id in running:
        found.waiting.pop(session_id, None)  # behind a running one: its drain, or a takeover of it, comes first
    return found


class OrphanWatch:
    """Resumes the drain of an open session whose submissions another owner left behind, and
    (after :meth:`sweep`) hands the other sessions that need one to a :class:`Sweeper`.

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
        self._sweeper: Sweeper | None = None
        self._task: asyncio.Task[None] | None = None
        self._reports: set[asyncio.Task[None]] = set()
        # Sessions whose pending rows had nothing running ahead at the last look: since when.
        self._waiting: dict[str, float] = {}
        self._next_expiry = float("inf")  # the earliest lease another owner holds in a watched session

    def start(self) -> None:
        """Start watching (once; a store no other process can reach needs no watching)."""
        if self._task is None and not getattr(self._db.sync, "in_memory", False):
            self._task = asyncio.get_running_loop().create_task(
                self._watch(), name="think-orphan-watch", context=contextvars.Context()
            )

    def sweep(self, sweeper: Sweeper) -> None:
        """From now on watch every session of the store: hand the ones nobody here has open
        to ``sweeper``."""
        self._sweeper = sweeper
        self.start()

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
        """One look: resume the open sessions that need it, and hand the others to the
        sweeper; returns the ids of the sessions resumed or taken over."""
        watched = set(self._open_sessions())
        self._next_expiry = float("inf")
        if not watched and self._sweeper is None:
            self._waiting.clear()
            return []
        rows = await self._db.unfinished_submissions()
        now = time.time()
        found = find_orphans(
            rows, self._db.sync.submission_owner(), lease=self._lease, now=now, here=this_process(),
            within=watched if self._sweeper is None else None,  # without a sweeper, only open sessions are ours
        )
        self._next_expiry = found.next_expiry
        since = {sid: self._waiting.get(sid, now) for sid in found.waiting}
        # Pending with nothing ahead at two looks in a row: the owner died before claiming it.
        waited = {sid for sid, first in since.items() if first < now}
        self._waiting = since
        due = set(found.orphaned) | waited
        resumed = sorted(due & watched)
        for session_id in resumed:
            self._resume(session_id)
        if self._sweeper is None:
            return resumed
        # A session nobody here has open is only taken once its pending rows waited a little
        # longer than a live accepting process needs to claim them.
        elsewhere = [
            sid for sid in due - watched if sid in found.orphaned or now - since[sid] >= 2 * self._interval
        ]
        taken = self._sweeper.take(elsewhere)
        for session_id in taken:
            pending = found.waiting.get(session_id)
            if pending is not None and session_id not in found.orphaned:
                task = asyncio.get_running_loop().create_task(self._report_pickup(pending), context=contextvars.Context())
                self._reports.add(task)
                task.add_done_callback(self._reports.discard)
        return sorted([*resumed, *taken])

    async def _report_pickup(self, pending: UnfinishedSubmission) -> None:
        """Log a never-claimed submission once it is claimed, if this process claimed it:
        several processes may go for it, one runs it, and that one says so."""
        me = self._db.sync.submission_owner()
        while True:
            row = await self._db.get_submission(pending.session_id, pending.submission_id)
            if row is None or row.status != "pending":
                break
            await asyncio.sleep(self._interval)
        if row is not None and row.owner is not None and row.owner.id == me.id and row.started_at is not None:
            logger.info(
                "picked up submission %s of session %s: claimed %.1f s after it was accepted, "
                "by a process that never claimed it",
                row.submission_id, row.session_id, row.started_at - row.created_at,
            )

    async def aclose(self) -> None:
        tasks = [*self._reports, *([self._task] if self._task is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
