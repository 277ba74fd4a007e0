"""Running submissions' leases are renewed by one thread per store, each on its own schedule,
while the event loop is blocked too; a stopped lease is no longer renewed, a lease found lost
cancels its turn on the loop, and the thread ends when nothing is left to renew.

Against a real SQLite store (its heartbeats counted); the threads are the process's own.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from think_core.durable import lease as lease_module
from think_core.durable.lease import LeaseKeeper
from think_core.store import SQLiteStore
from think_core.types import UIMessage

SESSION = "s"
INTERVAL = 0.1
DEADLINE = 30.0


class CountingStore(SQLiteStore):
    """A SQLite store counting the heartbeats of each submission."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.beats: collections.Counter[str] = collections.Counter()

    def heartbeat_submission(self, session_id: str, submission_id: str) -> bool:
        self.beats[submission_id] += 1
        return super().heartbeat_submission(session_id, submission_id)


def running(store: CountingStore, n: int) -> list[str]:
    """``n`` submissions of one session, each claimed (running, owned by ``store``)."""
    ids = []
    for i in range(n):
        row, _ = store.create_submission(
            SESSION, [UIMessage(id=f"m{i}", role="user", parts=[{"type": "text", "text": str(i)}])]
        )
        ids.append(row.submission_id)
    for _ in range(n):
        assert store.claim_next_submission(SESSION, lease=30.0) is not None
    return ids


def lease_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "think-leases"]


def renewal_threads(store: CountingStore) -> int:
    """How many renewal threads the store has alive (other tests' stores may still have theirs)."""
    return lease_module._RENEWERS[store].threads


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CountingStore]:
    counting = CountingStore(str(tmp_path / "s.db"))
    yield counting
    counting.close()


def keep(
    store: CountingStore, sid: str, on_lost: Callable[[], object] = lambda: None, interval: float = INTERVAL
) -> LeaseKeeper:
    return LeaseKeeper(store, SESSION, sid, interval=interval, on_lost=on_lost).start()


async def renewed_on(store: CountingStore, sid: str, times: int) -> None:
    """Until ``sid``'s lease has been renewed ``times`` more times."""
    target = store.beats[sid] + times
    await until(lambda: store.beats[sid] >= target, f"{sid} renewed {times} more times")


async def until(condition: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def test_many_running_submissions_share_one_renewal_thread(store: CountingStore) -> None:
    ids = running(store, 20)
    before = set(lease_threads())
    # 20 renewals a second: a busy machine keeps up with them. (At INTERVAL's 200 a second a
    # renewal slower than the gap to the next one due starts a watcher, up to MAX_THREADS, as
    # designed; the surplus ends when renewals catch up again.)
    keepers = [keep(store, sid, interval=1.0) for sid in ids]
    try:
        await until(lambda: all(store.beats[sid] >= 3 for sid in ids), f"every lease renewed: {store.beats}")
        # Two in the steady state: one renews while the other watches the due times (other
        # tests' stores may still have theirs). One per submission would never come down to it.
        await until(
            lambda: len(set(lease_threads()) - before) <= 2 and renewal_threads(store) <= 2,
            f"two renewal threads: {len(set(lease_threads()) - before)} new, {renewal_threads(store)} the store's",
        )
        assert renewal_threads(store) <= lease_module.MAX_THREADS
    finally:
        for keeper in keepers:
            keeper.stop()


async def test_leases_are_renewed_while_the_event_loop_is_blocked(store: CountingStore) -> None:
    [sid] = running(store, 1)
    keeper = keep(store, sid)
    before = store.beats[sid]
    time.sleep(12 * INTERVAL)  # a sync hook that blocks the loop
    assert store.beats[sid] - before >= 3
    keeper.stop()


async def test_a_stopped_lease_is_no_longer_renewed(store: CountingStore) -> None:
    kept, stopped = running(store, 2)
    keepers = {sid: keep(store, sid) for sid in (kept, stopped)}
    await renewed_on(store, stopped, 1)
    keepers[stopped].stop()
    after_stop = store.beats[stopped]
    await renewed_on(store, kept, 4)
    assert store.beats[stopped] <= after_stop + 1  # (a renewal already under way may end)
    keepers[kept].stop()


async def test_a_lease_found_lost_cancels_its_turn_on_the_loop_and_is_dropped(store: CountingStore) -> None:
    lost_sid, kept = running(store, 2)
    loop = asyncio.get_running_loop()
    lost = asyncio.Event()
    seen_on: list[asyncio.AbstractEventLoop] = []

    def on_lost() -> None:
        seen_on.append(asyncio.get_running_loop())
        lost.set()

    keep(store, lost_sid, on_lost)
    other = keep(store, kept)
    assert store.finish_submission(SESSION, lost_sid, "completed")  # answered elsewhere
    await asyncio.wait_for(lost.wait(), DEADLINE)
    assert seen_on == [loop]
    beats = store.beats[lost_sid]
    await renewed_on(store, kept, 4)
    assert store.beats[lost_sid] == beats  # not renewed again
    other.stop()


async def test_the_threads_end_when_nothing_is_left_to_renew(store: CountingStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease_module, "IDLE_EXIT", 0.3)
    first, second = running(store, 2)
    before = set(lease_threads())
    keeper = keep(store, first)
    await renewed_on(store, first, 1)
    mine = set(lease_threads()) - before
    assert mine and renewal_threads(store) >= 1
    keeper.stop()
    await until(lambda: not any(t.is_alive() for t in mine), "the idle threads ended")
    assert renewal_threads(store) == 0
    again = keep(store, second)
    await renewed_on(store, second, 1)  # by a new thread
    assert renewal_threads(store) >= 1
    again.stop()


async def test_a_renewal_that_hangs_does_not_hold_up_the_others(store: CountingStore) -> None:
    stuck_sid, *others = running(store, 4)
    began, release = threading.Event(), threading.Event()
    real = store.heartbeat_submission

    def heartbeat(session_id: str, submission_id: str) -> bool:
        if submission_id == stuck_sid:
            began.set()
            release.wait(DEADLINE)  # a lock another process holds, a stuck connection
        return real(session_id, submission_id)

    store.heartbeat_submission = heartbeat  # type: ignore[method-assign]
    try:
        # At once: one thread watches them all; the stuck lease falls due first, and the thread
        # that leaves to renew it must leave a watcher behind.
        keepers = [keep(store, sid) for sid in (stuck_sid, *others)]
        assert renewal_threads(store) == 1
        await until(began.is_set, "the stuck renewal began")
        for sid in others:
            await renewed_on(store, sid, 4)
        assert store.beats[stuck_sid] == 0  # still hanging
        assert 2 <= renewal_threads(store) <= lease_module.MAX_THREADS
    finally:
        release.set()
    for keeper in keepers:
        keeper.stop()
