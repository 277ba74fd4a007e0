"""Group commit on a SQLite file: the store calls queued behind each other on the store's thread
run as one transaction — one commit for the burst — and each call still succeeds or fails as if
it had run alone: its error undoes its own writes only, a failed commit fails every call of the
group (none of their writes is in), and a group whose transaction the database dropped fails
whole without running the rest outside a transaction."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from think_core.store import AsyncStore, SQLiteStore
from think_core.store.threads import GroupBroken
from think_core.types import UIMessage


def _message(i: int) -> UIMessage:
    return UIMessage(id=f"m{i}", role="user", parts=[{"type": "text", "text": f"hello {i}"}])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "group.db") as store:
        yield store


def _count_commits(store: SQLiteStore) -> list[str]:
    commits: list[str] = []
    store._conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    return commits


async def _queued_behind_a_blocker(db: AsyncStore, calls: list[Callable[[SQLiteStore], Any]]) -> list[Any]:
    """Run ``calls`` on the store's thread all queued behind one that holds the thread until
    they are queued: they are taken as groups (``return_exceptions``: each call's outcome)."""
    entered, release = threading.Event(), threading.Event()

    def blocker(_store: SQLiteStore) -> None:
        entered.set()
        release.wait(30)

    first = asyncio.ensure_future(db.run(blocker))
    assert await asyncio.to_thread(entered.wait, 30)
    rest = [asyncio.ensure_future(db.run(call)) for call in calls]
    await asyncio.sleep(0)  # every call is on the queue before the thread goes on
    release.set()
    await first
    return await asyncio.gather(*rest, return_exceptions=True)


async def test_calls_queued_together_commit_once_and_all_land(store: SQLiteStore) -> None:
    db = AsyncStore(store)
    commits = _count_commits(store)
    try:
        outcomes = await _queued_behind_a_blocker(
            db, [lambda s, i=i: s.append_messages(f"s{i % 3}", [_message(i)]) for i in range(20)]
        )
    finally:
        db.shutdown()
    assert all(isinstance(outcome, list) and len(outcome) == 1 for outcome in outcomes)
    # 20 appends (plus the blocker): one transaction each would be 21 commits.
    assert 1 <= len(commits) <= 3, commits
    for k in range(3):
        assert [m.id for m in store.list_messages(f"s{k}")] == [f"m{i}" for i in range(k, 20, 3)]


async def test_a_failing_call_undoes_only_its_own_writes(store: SQLiteStore) -> None:
    db = AsyncStore(store)

    def half_then_fail(s: SQLiteStore) -> None:
        s.append_messages("s", [_message(1)])
        raise ValueError("changed my mind")

    try:
        outcomes = await _queued_behind_a_blocker(db, [
            lambda s: s.append_messages("s", [_message(0)]),
            half_then_fail,
            lambda s: s.append_messages("s", [_message(2)]),
            lambda s: s.append_messages("s", [_message(0)]),  # already there: appends nothing
        ])
    finally:
        db.shutdown()
    assert [m.id for m in outcomes[0]] == ["m0"]
    assert isinstance(outcomes[1], ValueError) and str(outcomes[1]) == "changed my mind"
    assert [m.id for m in outcomes[2]] == ["m2"]
    assert outcomes[3] == []
    assert [m.id for m in store.list_messages("s")] == ["m0", "m2"]


async def test_a_failed_commit_fails_every_call_of_the_group_and_keeps_none(store: SQLiteStore) -> None:
    db = AsyncStore(store)

    def orphan_row(s: SQLiteStore) -> None:
        # A row whose session does not exist, its foreign key checked only at COMMIT: the
        # group's commit itself fails.
        conn = s._joined()
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute("INSERT INTO state (session_id, key, value, updated_at) VALUES ('nobody', 'k', '1', 0)")

    try:
        outcomes = await _queued_behind_a_blocker(db, [
            lambda s: s.append_messages("a", [_message(0)]),
            orphan_row,
            lambda s: s.append_messages("b", [_message(1)]),
        ])
        # The store goes on: the next call is a transaction of its own and lands.
        assert [m.id for m in await db.append_messages("c", [_message(2)])] == ["m2"]
    finally:
        db.shutdown()
    assert all(isinstance(outcome, sqlite3.IntegrityError) for outcome in outcomes), outcomes
    assert store.list_messages("a") == [] and store.list_messages("b") == []
    assert [m.id for m in store.list_messages("c")] == ["m2"]


async def test_a_group_whose_transaction_is_gone_fails_whole_and_runs_nothing_outside_it(
    store: SQLiteStore,
) -> None:
    db = AsyncStore(store)
    ran_after: list[str] = []

    def drop_the_transaction(s: SQLiteStore) -> None:
        # What SQLite does on some I/O errors: the whole transaction is rolled back under us.
        s.append_messages("b", [_message(1)])
        s._joined().execute("ROLLBACK")

    def after(s: SQLiteStore) -> None:
        ran_after.append("after")
        s.append_messages("c", [_message(2)])

    try:
        outcomes = await _queued_behind_a_blocker(db, [
            lambda s: s.append_messages("a", [_message(0)]),
            drop_the_transaction,
            after,
        ])
        assert [m.id for m in await db.append_messages("d", [_message(3)])] == ["m3"]
    finally:
        db.shutdown()
    assert all(isinstance(outcome, GroupBroken) for outcome in outcomes), outcomes
    assert ran_after == []  # not run in autocommit, where each statement would commit alone
    for session in "abc":
        assert store.list_messages(session) == []
    assert [m.id for m in store.list_messages("d")] == ["m3"]


async def test_a_lone_call_is_its_own_transaction(store: SQLiteStore) -> None:
    db = AsyncStore(store)
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    try:
        await db.append_messages("s", [_message(0)])
    finally:
        db.shutdown()
    # (a call that need not wait runs inline, the busy timeout off around it: not statements of its transaction)
    statements = [sql for sql in statements if not sql.startswith("PRAGMA busy_timeout")]
    assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
    assert not any(sql.startswith("SAVEPOINT") for sql in statements)
