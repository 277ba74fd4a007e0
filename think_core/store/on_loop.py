"""A SQLite file's brief store calls, run on the event loop when that costs no wait.

A SQLite file's transaction of a few indexed statements takes tens of microseconds; the hop to
the store's thread and back costs more (two wakes of sleeping threads). :class:`LoopCalls` runs
such a call where it is made when the connection is free, no other connection holds the file's
write lock (``SQLiteConnection.run_without_waiting``: nothing is written when it gives up) and
one session at a time makes them; otherwise the caller sends it to the store's thread. Which
calls are brief is :data:`BRIEF_CALLS` (and ``AsyncStore.atomic(brief=True)``): never one that
may read a whole history, stream or table, so the loop never waits for a long read either.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

__all__ = ["BRIEF_CALLS", "LoopCalls", "RunsWithoutWaiting"]

T = TypeVar("T")

#: The store calls that are a few indexed statements, however long the session.
BRIEF_CALLS = frozenset({
    "ensure_session", "get_message", "append_messages", "upsert_message", "create_submission",
    "get_submission", "get_submission_by_key", "claim_next_submission", "heartbeat_submission",
    "store_submission_answer", "mark_submission_applied", "requeue_submission", "finish_submission",
    "journal_submission", "retake_submission", "open_stream", "append_stream_chunks", "truncate_stream",
    "finish_stream", "get_stream", "get_state", "set_state",
})

#: A session's brief call this soon (seconds) after its previous one, with another session's
#: between them, counts as sessions interleaving; brief calls then go to the store's thread for
#: this long after (see :meth:`LoopCalls.one_session_at_a_time`). Generous: with hundreds of
#: chats at once a session's calls come back tens of milliseconds apart, and sending a call to
#: the thread when it need not costs only its hop.
INTERLEAVED_WITHIN = 1.0
INTERLEAVED_FOR = 1.0


class RunsWithoutWaiting(Protocol):
    """A store whose calls may run where they are made when they need not wait (a SQLite file:
    see ``SQLiteConnection``)."""

    def run_without_waiting(self, call: Callable[[], T], /) -> tuple[bool, T | None]: ...

    @property
    def checkpoint_due(self) -> bool: ...

    def checkpoint(self) -> None: ...


class LoopCalls:
    """The brief calls of one store that run on the event loop, and when they may."""

    def __init__(self, store: RunsWithoutWaiting) -> None:
        self.store = store
        # The session of the last brief call, when it was made, the other sessions' last brief
        # calls, and until when calls count as coming from several sessions at once.
        self._last_session: str | None = None
        self._last_call = self._together_until = 0.0
        self._seen: dict[str | None, float] = {}
        self._prune_above = 256  # (doubles with what stays: pruning costs O(1) per call)

    def run(self, call: Callable[[], T], session_id: str | None) -> tuple[bool, T | None]:
        """``call()`` here: ``(True, its result)``; ``(False, None)``, nothing written, when it
        should go to the store's thread instead."""
        if not self.one_session_at_a_time(session_id):
            return False, None
        return self.store.run_without_waiting(call)

    def one_session_at_a_time(self, session_id: str | None) -> bool:
        """Whether the brief calls come from one session at a time now. When sessions' calls
        interleave (one calls again right after another's), the store's thread serves them
        better than the loop: their SQLite work runs beside the loop's (the database releases
        the GIL) and the calls queued together commit together, which outweighs the hops (100
        concurrent chats on a file: ~1,450 turns/s so, ~1,150 inline). One conversation at a
        time — sessions one after another included — the hops are all the thread costs."""
        now = time.monotonic()
        last = self._last_session
        if session_id != last:
            seen = self._seen.get(session_id)
            if seen is not None and now - seen < INTERLEAVED_WITHIN:
                self._together_until = now + INTERLEAVED_FOR
            if last is not None:
                seen_at = self._seen
                seen_at[last] = self._last_call
                if len(seen_at) > self._prune_above:  # (keep the ones that can still count)
                    self._seen = {s: t for s, t in seen_at.items() if now - t < INTERLEAVED_WITHIN}
                    self._prune_above = max(256, 2 * len(self._seen))
            self._last_session = session_id
        self._last_call = now
        return now >= self._together_until
