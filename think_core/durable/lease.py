"""Keeping running submissions' leases alive from a thread of the store's own.

Another process retakes a ``running`` submission once its lease expires. The lease must
therefore be renewed even while the event loop is blocked — by a sync hook that sleeps or makes
a blocking call — or a slow turn would be run twice. So the renewal does not run on the loop: a
thread calls the (thread-safe) synchronous store three times per lease. When a renewal finds the
row no longer running (it was finished or cancelled elsewhere), the turn is cancelled on the loop.

A store's renewal threads serve all of its running submissions, each renewed on its own
schedule: a server with hundreds of live chats holds two threads for them, not one per chat,
and a turn does not start and end one.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

from ..store import Store

__all__ = ["LeaseKeeper"]

logger = logging.getLogger("think.submissions")

#: Seconds a store's renewal thread waits with nothing to renew before it ends (the next lease
#: starts it again).
IDLE_EXIT = 30.0
#: The most renewal threads of one store: renewals that hang past this many hold up the rest.
MAX_THREADS = 8


class LeaseKeeper:
    """Renews the lease of ``submission_id`` every ``interval`` seconds until :meth:`stop`."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        submission_id: str,
        *,
        interval: float,
        on_lost: Callable[[], object],
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._submission_id = submission_id
        self.interval = interval
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self.stopped = False

    def start(self) -> LeaseKeeper:
        _renewer_of(self._store).add(self)
        return self

    def stop(self) -> None:
        """Stop renewing. Does not wait: a renewal in flight may be waiting for the database,
        and the loop must not wait with it."""
        self.stopped = True

    def renew(self) -> bool:
        """One renewal, on the renewal thread; whether to go on renewing."""
        try:
            still_ours = self._store.heartbeat_submission(self._session_id, self._submission_id)
        except Exception:
            if not self.stopped:
                logger.warning("heartbeat of submission %s failed; retrying", self._submission_id, exc_info=True)
            return True
        if still_ours:
            return True
        if not self.stopped:
            logger.warning("submission %s was finished elsewhere; cancelling its turn here", self._submission_id)
            try:
                self._loop.call_soon_threadsafe(self._on_lost)
            except RuntimeError:  # the loop is closed: nothing runs the turn any more
                pass
        return False


class _Renewer:
    """A store's renewal threads: each keeper is renewed ``interval`` seconds after its last
    renewal (its start, at first), in the order they fall due.

    One thread watches the due times while another renews, so a renewal that hangs — on a lock
    another process holds, a stuck connection — does not hold up the other submissions': a
    thread leaving to renew starts a watcher when none is left, up to :data:`MAX_THREADS`. Two
    threads per store in the steady state; an idle one ends after :data:`IDLE_EXIT`."""

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._due: list[tuple[float, int, LeaseKeeper]] = []  # a heap, by when each falls due
        self._order = itertools.count()  # ties: first come, first renewed
        self.threads = 0  # alive
        self._watching = 0  # waiting for the next due time (not renewing), or about to

    def add(self, keeper: LeaseKeeper) -> None:
        with self._wake:
            heapq.heappush(self._due, (time.monotonic() + keeper.interval, next(self._order), keeper))
            if self._watching == 0 and self.threads < MAX_THREADS:  # none, or all of them renewing
                self._start_thread()
            self._wake.notify()

    def _start_thread(self) -> None:
        """(Holding ``_wake``.) The new thread counts as watching from now: a burst of leases
        starts one, not one each."""
        self.threads += 1
        self._watching += 1
        # A daemon: a lease nobody stopped must not hold the interpreter open.
        threading.Thread(target=self._run, name="think-leases", daemon=True).start()

    def _next(self, *, first: bool = False) -> LeaseKeeper | None:
        """The next keeper due (waiting until it is); ``None``: this thread ends. ``first``:
        the thread's first call (counted as watching when it was started)."""
        with self._wake:
            if not first:
                self._watching += 1
            try:
                while True:
                    while self._due and self._due[0][2].stopped:
                        heapq.heappop(self._due)
                    if self._watching > 2:  # one watcher too many (after renewals that hung)
                        self.threads -= 1
                        return None
                    if not self._due:
                        if not self._wake.wait(IDLE_EXIT) and not self._due:
                            self.threads -= 1  # idle: the next add() starts one
                            return None
                        continue
                    when, _, keeper = self._due[0]
                    wait = when - time.monotonic()
                    if wait > 0:
                        self._wake.wait(wait)
                        continue
                    heapq.heappop(self._due)
                    if self._watching == 1 and self._due and self.threads < MAX_THREADS:
                        self._start_thread()  # someone watches the others while this one renews
                    return keeper
            finally:
                self._watching -= 1

    def _run(self) -> None:
        keeper = self._next(first=True)
        while keeper is not None:
            if not keeper.stopped and keeper.renew() and not keeper.stopped:
                with self._wake:
                    heapq.heappush(self._due, (time.monotonic() + keeper.interval, next(self._order), keeper))
                    self._wake.notify()
            del keeper  # nothing of a finished turn outlives it on this thread
            keeper = self._next()


_RENEWERS: weakref.WeakKeyDictionary[Store, _Renewer] = weakref.WeakKeyDictionary()
_RENEWERS_LOCK = threading.Lock()


def _renewer_of(store: Store) -> _Renewer:
    with _RENEWERS_LOCK:
        try:
            renewer = _RENEWERS.get(store)
            if renewer is None:
                renewer = _RENEWERS[store] = _Renewer()
        except TypeError:  # a store that cannot be weakly referenced: a thread for this lease alone
            renewer = _Renewer()
        return renewer


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads (and maybe a lock one held)."""
    global _RENEWERS_LOCK
    _RENEWERS_LOCK = threading.Lock()
    _RENEWERS.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)
