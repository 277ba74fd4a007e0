"""What only the PostgreSQL store has: row-locked claims and retakes under real concurrency
(several stores, each with its own pool, hammering one queue from threads), its schema
migrations, the URL a store is opened from, and a clear error without psycopg."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from think_core.agent import Think
from think_core.errors import ConfigurationError
from think_core.models.scripted import ScriptedModel
from think_core.store import open_store
from think_core.types import UIMessage

from ..support.postgres import fresh_schema, postgres_url

S = "queue"


def msg(mid: str) -> UIMessage:
    return UIMessage(id=mid, role="user", parts=[{"type": "text", "text": mid}])


@pytest.fixture
def pg() -> Iterator[tuple[str, str]]:
    """``(url, schema)``: the test server and a schema of this test's own."""
    url = postgres_url()
    with fresh_schema(url, "pgt") as schema:
        yield url, schema


def _open(pg: tuple[str, str], **kw: Any) -> Any:
    from think_core.store.postgres import PostgresStore

    return PostgresStore(pg[0], schema=pg[1], **kw)


def _in_threads(count: int, work: Callable[[int], None]) -> None:
    """Run ``work(i)`` in ``count`` threads started together; re-raise the first failure."""
    start = threading.Barrier(count)
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait(timeout=60)
            work(i)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    if failures:
        raise failures[0]


def test_two_stores_draining_one_queue_from_eight_threads_claim_each_submission_once(pg):
    stores = [_open(pg, pool_size=4), _open(pg, pool_size=4)]
    try:
        accepted = [stores[0].create_submission(S, [msg(f"m{i}")])[0].submission_id for i in range(400)]
        claims: list[tuple[str, str]] = []  # (submission id, claiming store's owner id)
        lock = threading.Lock()

        def drain(i: int) -> None:
            store = stores[i % 2]
            while (sub := store.claim_next_submission(S, lease=30)) is not None:
                with lock:
                    claims.append((sub.submission_id, store.owner_id))
                # Only the claimer owns the row: its answer is the one stored.
                assert store.store_submission_answer(S, sub.submission_id, None, "completed")

        _in_threads(8, drain)
        counts = Counter(sid for sid, _ in claims)
        assert sorted(counts) == sorted(accepted)
        assert set(counts.values()) == {1}, [sid for sid, n in counts.items() if n > 1]
        assert {owner for _, owner in claims} == {s.owner_id for s in stores}  # both took part
        assert stores[1].list_submissions(S, ["pending", "running"]) == []
    finally:
        for s in stores:
            s.close()


def test_in_order_claims_from_many_threads_run_the_queue_one_at_a_time_in_acceptance_order(pg):
    stores = [_open(pg), _open(pg)]
    try:
        accepted = [stores[0].create_submission(S, [msg(f"m{i}")])[0].submission_id for i in range(60)]
        order: list[str] = []
        running = threading.Semaphore(1)  # acquired without blocking: two at once is a failure

        def drain(i: int) -> None:
            store = stores[i % 2]
            deadline = time.monotonic() + 120
            while store.list_submissions(S, ["pending", "running"], limit=1):
                assert time.monotonic() < deadline, "the queue was not drained"
                sub = store.claim_next_submission(S, in_order=True, lease=30)
                if sub is None:
                    time.sleep(0.001)
                    continue
                assert running.acquire(blocking=False), "two in-order submissions ran at once"
                order.append(sub.submission_id)
                running.release()
                assert store.store_submission_answer(S, sub.submission_id, None, "completed")

        _in_threads(6, drain)
        assert order == accepted
    finally:
        for s in stores:
            s.close()


def _expire(pg: tuple[str, str]) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg[0]) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.submissions SET heartbeat_at = 1, started_at = 1 WHERE status = 'running'").format(
                sql.Identifier(pg[1])
            )
        )


def test_concurrent_retakes_of_expired_leases_take_each_row_once(pg):
    dead = _open(pg)
    for i in range(40):
        dead.create_submission(S, [msg(f"m{i}")])
        assert dead.claim_next_submission(S, lease=30) is not None
    dead.close()
    _expire(pg)
    stores = [_open(pg) for _ in range(4)]
    try:
        taken: list[list[str]] = [[] for _ in stores]

        def retake(i: int) -> None:
            taken[i] = [r.submission_id for r in stores[i].retake_stale_submissions(S, stale_after=30, lease=30)]

        _in_threads(len(stores), retake)
        everything = [sid for batch in taken for sid in batch]
        assert len(everything) == 40 and len(set(everything)) == 40
    finally:
        for s in stores:
            s.close()


def test_concurrent_conditional_retakes_of_one_row_let_exactly_one_win(pg):
    dead = _open(pg)
    sub, _ = dead.create_submission(S, [msg("m")])
    claimed = dead.claim_next_submission(S, lease=30)
    dead.close()
    stores = [_open(pg) for _ in range(4)]
    try:
        results: list[Any] = [None] * 16

        def retake(i: int) -> None:
            results[i] = stores[i % 4].retake_submission(
                S, sub.submission_id, if_owner=claimed.owner.id, if_heartbeat_at=claimed.heartbeat_at, lease=30
            )

        _in_threads(16, retake)
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        row = stores[0].get_submission(S, sub.submission_id)
        assert row.owner.id in {s.owner_id for s in stores} and row.owner.id != claimed.owner.id
    finally:
        for s in stores:
            s.close()


def test_concurrent_accepts_with_one_idempotency_key_make_one_submission(pg):
    stores = [_open(pg) for _ in range(4)]
    try:
        results: list[Any] = [None] * 12

        def accept(i: int) -> None:
            results[i] = stores[i % 4].create_submission(S, [msg("m")], idempotency_key="k")

        _in_threads(12, accept)
        assert sum(created for _, created in results) == 1
        assert len({sub.submission_id for sub, _ in results}) == 1
        assert len(stores[0].list_submissions(S)) == 1
    finally:
        for s in stores:
            s.close()


def _version(pg: tuple[str, str]) -> list[tuple[int]]:
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg[0]) as conn:
        return conn.execute(
            sql.SQL("SELECT version FROM {}.think_schema_version").format(sql.Identifier(pg[1]))
        ).fetchall()


def test_opening_creates_the_schema_once_and_reopening_keeps_the_rows(pg):
    from think_core.store.postgres import SCHEMA_VERSION

    opened: list[Any] = [None] * 4

    def open_one(i: int) -> None:  # several processes starting at once on an empty database
        opened[i] = _open(pg)

    _in_threads(4, open_one)
    try:
        assert _version(pg) == [(SCHEMA_VERSION,)]
        opened[0].append_messages("s", [msg("a")])
        opened[1].set_state("s", "k", {"v": [1, "é"]})
    finally:
        for s in opened:
            s.close()
    with _open(pg) as again:
        assert [m.id for m in again.list_messages("s")] == ["a"]
        assert again.get_state("s", "k") == {"v": [1, "é"]}
    assert _version(pg) == [(SCHEMA_VERSION,)]


def test_a_schema_newer_than_the_code_is_refused(pg):
    import psycopg
    from psycopg import sql

    _open(pg).close()
    with psycopg.connect(pg[0]) as conn:
        conn.execute(sql.SQL("UPDATE {}.think_schema_version SET version = 999").format(sql.Identifier(pg[1])))
    with pytest.raises(RuntimeError, match="newer than this code supports"):
        _open(pg)


def test_schemas_keep_stores_apart(pg):
    url = pg[0]
    with fresh_schema(url, "pgt") as other, _open(pg) as mine, _open((url, other)) as theirs:
        mine.append_messages("s", [msg("mine")])
        assert theirs.list_messages("s") == []
        assert theirs.list_submissions("s") == []


def test_repr_and_location_hide_the_password(pg):
    url, schema = pg
    with_password = url.replace("postgres@", "postgres:s3cret-pw@", 1)
    assert "s3cret-pw" in with_password
    with _open((with_password, schema)) as store:  # trust authentication ignores it
        assert "s3cret-pw" not in repr(store) and "s3cret-pw" not in store.location
        assert store.in_memory is False
    store.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        store.list_messages("s")


def test_open_store_takes_a_postgresql_url():
    from psycopg import connect

    from think_core.store.postgres import PostgresStore

    url = postgres_url()
    try:
        for spec in (url, url.replace("postgresql://", "postgres://", 1)):
            store = open_store(spec)
            store.close()
            assert isinstance(store, PostgresStore) and store.schema == "think"  # the default schema
    finally:
        with connect(url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS think CASCADE")


async def test_two_agents_on_one_postgresql_schema_share_sessions_and_idempotency_keys(pg):
    from think_core.store.postgres import PostgresStore

    # Either agent may run a submission (whoever opens the session drains it): both answer alike.
    first = Think(ScriptedModel(["ok"], repeat=True), store=PostgresStore(pg[0], schema=pg[1]), load_entrypoints=False)
    second = Think(ScriptedModel(["ok"], repeat=True), store=PostgresStore(pg[0], schema=pg[1]), load_entrypoints=False)
    try:
        a = await first.session("s").submit_messages("hello", idempotency_key="k1")
        done = await first.session("s").wait_for_submission(a.submission_id, timeout=30)
        assert done.status == "completed"
        again = await second.session("s").submit_messages("hello", idempotency_key="k1")
        assert again.accepted is False and again.submission_id == a.submission_id
        b = await second.session("s").submit_messages("next")
        assert (await second.session("s").wait_for_submission(b.submission_id, timeout=30)).status == "completed"
        texts = [(m.role, m.text) for m in await first.session("s").messages()]
        assert texts == [("user", "hello"), ("assistant", "ok"), ("user", "next"), ("assistant", "ok")]
    finally:
        await first.aclose()
        await second.aclose()


def test_without_psycopg_a_postgresql_store_names_the_extra(monkeypatch):
    for name in list(sys.modules):
        if name.startswith(("psycopg", "think_core.store.postgres", "think_core.store._pg_")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg → ImportError
    with pytest.raises(ConfigurationError, match=r"'postgres' extra.*pip install 'think-agent\[postgres\]'"):
        open_store("postgresql://nobody@127.0.0.1:1/none")


def test_importing_think_never_imports_psycopg():
    code = "import sys, think_core, think_core.store, think_core.agent; print('psycopg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
