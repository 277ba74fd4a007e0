"""A SQLite file's calls run on the event loop when they need not wait, and on the store's thread
when they would: another connection holds the file's write lock, or a call is already queued
there (a later call never overtakes it). Nothing is written twice by the switch, the loop goes
on while a call waits, and the write-ahead log is checkpointed on the store's thread, not in a
call on the loop."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import think_core.store._sqlite_connection as sqlite_connection
from think_core.store import AsyncStore, SQLiteStore, on_loop
from think_core.types import UIMessage

S = "s"


def _message(i: int) -> UIMessage:
    return UIMessage(id=f"m{i}", role="user", parts=[{"type": "text", "text": f"hello {i}"}])


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "think.db"


@pytest.fixture
def db(path: Path) -> Iterator[AsyncStore]:
    store = SQLiteStore(path)
    db = AsyncStore(store)
    yield db
    db.shutdown()
    store.close()


class _LockHolder:
    """Another connection to the file holding its write lock (``BEGIN IMMEDIATE``) until released."""

    def __init__(self, path: Path) -> None:
        self.store = SQLiteStore(path)
        self.store._conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self.store._conn.execute("COMMIT")
        self.store.close()


async def test_a_call_that_need_not_wait_runs_on_the_event_loop(db: AsyncStore) -> None:
    ran_on: list[threading.Thread] = []

    def work(store: SQLiteStore) -> list[UIMessage]:
        ran_on.append(threading.current_thread())
        return store.append_messages(S, [_message(0)])

    assert [m.id for m in await db.atomic(work, session_id=S, brief=True)] == ["m0"]
    assert ran_on == [threading.current_thread()]
    await db.upsert_message(S, _message(1))
    assert db._threads is None  # no store thread was needed


async def test_calls_of_sessions_interleaving_go_to_the_store_thread(
    db: AsyncStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several conversations at once: their SQLite work runs beside the loop's, and what queues
    together commits together; one at a time, a conversation's calls stay on the loop."""
    store = db.sync
    ran_on: list[tuple[str, bool]] = []
    append = store.append_messages

    @functools.wraps(append)
    def recorded(session_id: str, messages: list[UIMessage]) -> list[UIMessage]:
        ran_on.append((session_id, threading.current_thread() is threading.main_thread()))
        return append(session_id, messages)

    monkeypatch.setattr(store, "append_messages", recorded)
    # Windows no busy machine can miss: what is tested is which calls count as interleaving.
    monkeypatch.setattr(on_loop, "INTERLEAVED_WITHIN", 60.0)
    monkeypatch.setattr(on_loop, "INTERLEAVED_FOR", 60.0)
    for session in ("a", "a", "b", "c"):  # one after another: each on the loop
        await db.append_messages(session, [_message(len(ran_on))])
    await db.append_messages("b", [_message(4)])  # b again, with c's call between: interleaving
    await db.append_messages("d", [_message(5)])  # (and for a while, any session's call)
    assert ran_on == [("a", True), ("a", True), ("b", True), ("c", True), ("b", False), ("d", False)]
    assert [m.id for m in await db.list_messages("b")] == ["m2", "m4"]


async def test_a_call_that_may_read_a_whole_history_runs_on_the_store_thread(
    db: AsyncStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However free the file is: the loop must not wait while a long history is read."""
    await db.append_messages(S, [_message(0)])
    store = db.sync
    ran_on: list[str] = []
    for name in ("list_messages", "history_changes"):
        method = getattr(store, name)
        monkeypatch.setattr(store, name, lambda *a, _method=method, **k: (
            ran_on.append(threading.current_thread().name), _method(*a, **k))[1])

    def work(store: SQLiteStore) -> int:
        return len(store.list_messages(S))

    assert await db.atomic(work, session_id=S, read_only=True) == 1  # (not declared brief)
    assert [m.id for m in (await db.history_changes(S)).appended] == ["m0"]  # (no mark: the whole history)
    assert [m.id for m in await db.list_messages(S)] == ["m0"]
    assert len(ran_on) == 3 and all(name.startswith("think-store") for name in ran_on), ran_on


async def test_a_call_that_would_wait_for_another_connection_waits_on_the_store_thread(
    db: AsyncStore, path: Path
) -> None:
    holder = _LockHolder(path)
    ran_on: list[str] = []

    def work(store: SQLiteStore) -> list[UIMessage]:
        ran_on.append(threading.current_thread().name)
        return store.append_messages(S, [_message(0)])

    try:
        call = asyncio.ensure_future(db.atomic(work, session_id=S, brief=True))
        ticks = 0
        while ticks < 20:  # the loop goes on while the call waits for the lock
            await asyncio.sleep(0.01)
            ticks += 1
        assert not call.done()
    finally:
        holder.release()
    assert [m.id for m in await asyncio.wait_for(call, 60)] == ["m0"]
    # Tried on the loop first, where it gave up at BEGIN before running anything; then run, once,
    # on the store's thread.
    assert len(ran_on) == 1 and ran_on[0].startswith("think-store")
    assert [m.id for m in await db.list_messages(S)] == ["m0"]  # written once


async def test_a_later_call_does_not_overtake_one_queued_on_the_store_thread(db: AsyncStore) -> None:
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def first_call(store: SQLiteStore) -> None:  # several calls (``run``): always on the thread
        entered.set()
        release.wait(30)
        store.append_messages(S, [_message(0)])
        order.append("first")

    first = asyncio.ensure_future(db.run(first_call))
    assert await asyncio.to_thread(entered.wait, 30)
    second = asyncio.ensure_future(db.append_messages(S, [_message(1)]))
    second.add_done_callback(lambda _: order.append("second"))
    await asyncio.sleep(0.05)
    assert not second.done()  # queued behind the first instead of running inline
    release.set()
    await asyncio.wait_for(asyncio.gather(first, second), 60)
    assert order == ["first", "second"]
    assert [m.id for m in await db.list_messages(S)] == ["m0", "m1"]


async def test_the_write_ahead_log_is_checkpointed_on_the_store_thread(
    db: AsyncStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_connection, "CHECKPOINT_EVERY", 5)
    store = db.sync
    assert isinstance(store, SQLiteStore)
    checkpointed_on: list[str] = []
    checkpoint = store.checkpoint

    def recorded() -> None:
        checkpoint()
        checkpointed_on.append(threading.current_thread().name)  # (once it is done)

    monkeypatch.setattr(store, "checkpoint", recorded)
    for i in range(5):
        await db.append_messages(S, [_message(i)])
    for _ in range(600):
        if checkpointed_on:
            break
        await asyncio.sleep(0.05)
    assert len(checkpointed_on) == 1 and checkpointed_on[0].startswith("think-store")
    assert not store.checkpoint_due
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0  # SQLite's own is off


def test_used_without_the_engine_the_store_checkpoints_as_it_commits(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_connection, "CHECKPOINT_EVERY", 3)
    with SQLiteStore(path) as store:
        for i in range(3):
            store.append_messages(S, [_message(i)])
        assert not store.checkpoint_due  # the third commit checkpointed, as SQLite's own would
        # (the log was copied into the file: a passive checkpoint now has nothing left to copy)
        busy, logged, copied = store._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert busy == 0 and logged == copied
