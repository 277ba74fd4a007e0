"""The PostgreSQL store's read-then-write sequences under real concurrency: several stores (each
with its own pool) racing from threads on one session — in-order claims, retaking expired
leases, conditional retakes, idempotent accepts, opening an empty schema — and the command
line and agents on a ``postgresql://`` URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

pytest.importorskip("psycopg")

from tests.support.messages import msg as user  # noqa: E402
from tests.support.postgres import drop_schema, fresh_database, postgres_url  # noqa: E402
from think_core import ScriptedModel, Think  # noqa: E402
from think_core.store.postgres import SCHEMA_VERSION, PostgresStore  # noqa: E402

S = "queue"


def open_stores(schema: str, count: int) -> list[PostgresStore]:
    return [PostgresStore(postgres_url(), schema=schema) for _ in range(count)]


def in_threads(count: int, work: Callable[[int], None]) -> None:
    """``work(i)`` in ``count`` threads released together; the first failure is re-raised."""
    start = threading.Barrier(count)
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait(timeout=60)
            work(i)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a worker thread hung"
    if failures:
        raise failures[0]


def test_in_order_claims_from_many_threads_run_the_queue_one_at_a_time_in_acceptance_order(pg_schema: str) -> None:
    pair = open_stores(pg_schema, 2)
    try:
        accepted = [pair[0].create_submission(S, [user(f"m{i}")])[0].submission_id for i in range(60)]
        order: list[str] = []
        running = threading.Semaphore(1)  # taken without waiting: two at once fails the test

        def drain(i: int) -> None:
            store = pair[i % 2]
            deadline = time.monotonic() + 120
            while store.list_submissions(S, ["pending", "running"], limit=1):
                assert time.monotonic() < deadline, "the queue was not drained"
                row = store.claim_next_submission(S, in_order=True, lease=30)
                if row is None:
                    time.sleep(0.001)
                    continue
                assert running.acquire(blocking=False), "two in-order submissions ran at once"
                order.append(row.submission_id)
                running.release()
                assert store.store_submission_answer(S, row.submission_id, None, "completed")

        in_threads(6, drain)
        assert order == accepted
    finally:
        for store in pair:
            store.close()


def _age_running_rows(schema: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".submissions SET heartbeat_at = 1, started_at = 1 WHERE status = \'running\'')


def test_stores_retaking_expired_leases_at_once_take_each_row_once(pg_schema: str) -> None:
    with PostgresStore(postgres_url(), schema=pg_schema) as dead:
        for i in range(40):
            dead.create_submission(S, [user(f"m{i}")])
            assert dead.claim_next_submission(S, lease=30) is not None
    _age_running_rows(pg_schema)  # its owner went silent long ago
    takers = open_stores(pg_schema, 4)
    try:
        taken: list[list[str]] = [[] for _ in takers]

        def retake(i: int) -> None:
            taken[i] = [row.submission_id for row in takers[i].retake_stale_submissions(S, stale_after=30, lease=30)]

        in_threads(len(takers), retake)
        everything = [sid for batch in taken for sid in batch]
        assert len(everything) == 40 and len(set(everything)) == 40
        owners = {row.owner.id for row in takers[0].list_submissions(S) if row.owner is not None}
        assert owners <= {t.owner_id for t in takers}
    finally:
        for store in takers:
            store.close()


def test_conditional_retakes_of_one_row_at_once_let_exactly_one_win(pg_schema: str) -> None:
    with PostgresStore(postgres_url(), schema=pg_schema) as dead:
        dead.create_submission(S, [user("m")], submission_id="sub")
        claimed = dead.claim_next_submission(S, lease=30)
    assert claimed is not None and claimed.owner is not None
    takers = open_stores(pg_schema, 4)
    try:
        results: list[Any] = [None] * 16

        def retake(i: int) -> None:
            results[i] = takers[i % 4].retake_submission(
                S, "sub", if_owner=claimed.owner.id, if_heartbeat_at=claimed.heartbeat_at, lease=30
            )

        in_threads(16, retake)
        assert len([r for r in results if r is not None]) == 1
        row = takers[0].get_submission(S, "sub")
        assert row is not None and row.owner is not None and row.owner.id in {t.owner_id for t in takers}
    finally:
        for store in takers:
            store.close()


def test_accepts_with_one_idempotency_key_at_once_make_one_submission(pg_schema: str) -> None:
    accepters = open_stores(pg_schema, 4)
    try:
        results: list[Any] = [None] * 12

        def accept(i: int) -> None:
            results[i] = accepters[i % 4].create_submission(S, [user("m")], idempotency_key="k")

        in_threads(12, accept)
        assert sum(created for _, created in results) == 1
        assert len({row.submission_id for row, _ in results}) == 1
        assert len(accepters[0].list_submissions(S)) == 1
    finally:
        for store in accepters:
            store.close()


def test_servers_starting_together_on_an_empty_schema_create_it_once(pg_schema: str) -> None:
    import psycopg

    opened: list[Any] = [None] * 4

    def open_one(i: int) -> None:
        opened[i] = PostgresStore(postgres_url(), schema=pg_schema)

    in_threads(4, open_one)
    try:
        opened[0].append_messages("s", [user("a")])
        opened[1].set_state("s", "k", {"v": [1, "é"]})
        assert [m.id for m in opened[3].list_messages("s")] == ["a"]
    finally:
        for store in opened:
            if store is not None:
                store.close()
    with psycopg.connect(postgres_url()) as conn:
        assert conn.execute(f'SELECT version FROM "{pg_schema}".think_schema_version').fetchall() == [(SCHEMA_VERSION,)]


def test_schemas_keep_stores_apart(pg_schema: str) -> None:
    other = f"{pg_schema}_b"
    try:
        with PostgresStore(postgres_url(), schema=pg_schema) as mine, PostgresStore(postgres_url(), schema=other) as theirs:
            mine.append_messages("s", [user("mine")])
            mine.create_submission("s", [user("q")])
            assert theirs.list_messages("s") == [] and theirs.list_submissions("s") == []
    finally:
        drop_schema(postgres_url(), other)


def test_importing_think_does_not_import_psycopg() -> None:
    code = "import sys, think_core, think_core.store, think_core.agent; print('psycopg' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


async def test_two_agents_on_one_schema_share_idempotency_keys(pg_schema: str) -> None:
    def agent() -> Think:  # either agent may run a submission: both answer alike
        return Think(ScriptedModel(["ok"], repeat=True), store=PostgresStore(postgres_url(), schema=pg_schema),
                     load_entrypoints=False)

    first, second = agent(), agent()
    try:
        a = await first.session("s").submit_messages("hello", idempotency_key="k1")
        assert (await first.session("s").wait_for_submission(a.submission_id, timeout=30)).status == "completed"
        again = await second.session("s").submit_messages("hello", idempotency_key="k1")
        assert again.accepted is False and again.submission_id == a.submission_id
        b = await second.session("s").submit_messages("next")
        assert (await second.session("s").wait_for_submission(b.submission_id, timeout=30)).status == "completed"
        texts = [(m.role, m.text) for m in await first.session("s").messages()]
        assert texts == [("user", "hello"), ("assistant", "ok"), ("user", "next"), ("assistant", "ok")]
    finally:
        await first.aclose()
        await second.aclose()


def test_the_command_line_runs_and_reads_conversations_on_a_postgresql_url(tmp_path: Path) -> None:
    def think(*args: str) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")}
        environ.update(THINK_HOME=str(tmp_path / "home"), COLUMNS="200")
        done = subprocess.run([sys.executable, "-m", "think_core.cli", *args], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path, env=environ)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    with fresh_database() as url:
        ran = think("run", "hello there", "--model", "demo", "--session", "greet", "--db", url)
        assert ran.returncode == 0, ran.stderr
        listed = think("sessions", "--json", "--db", url)
        assert listed.returncode == 0, listed.stderr
        assert [(r["session"], r["messages"], r["first"]) for r in json.loads(listed.stdout)] == [("greet", 2, "hello there")]
        shown = think("history", "greet", "--db", url)
        assert shown.returncode == 0 and "user: hello there" in shown.stdout
        # A password-checking server (bench/pg_local.sh) needs the URL's own; one that trusts
        # local connections ignores any.
        password = urlsplit(url).password or "hunter2"
        with_password = url if urlsplit(url).password else url.replace("@", f":{password}@", 1)
        missing = think("history", "nope", "--db", with_password)
        assert missing.returncode == 1 and "no session 'nope'" in missing.stderr
        assert password not in missing.stderr
    assert not (tmp_path / "home" / "think.db").exists()  # the conversations went to PostgreSQL only
