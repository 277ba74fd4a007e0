"""What the PostgreSQL store adds to the shared contract: claims that hold under concurrent
claimers on separate pools, versioned migrations, a clear error without the extra, and one turn
per session at a time across agents that share the database (a real PostgreSQL server)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

pytest.importorskip("psycopg")

from tests.support.messages import msg as user  # noqa: E402
from tests.support.postgres import drop_schema, postgres_url  # noqa: E402
from think_core import ScriptedModel, Step, Think, hookimpl  # noqa: E402
from think_core.store import open_store  # noqa: E402
from think_core.store.postgres import SCHEMA_VERSION, PostgresStore  # noqa: E402


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"store_{uuid.uuid4().hex[:12]}"
    yield name
    drop_schema(postgres_url(), name)


def test_concurrent_claimers_on_separate_pools_take_each_submission_once(schema: str) -> None:
    url = postgres_url()
    stores = [PostgresStore(url, schema=schema) for _ in range(2)]
    try:
        total = 200
        for i in range(total):
            stores[0].create_submission("s", [user(f"u{i}")], submission_id=f"sub{i}")
        claimed: list[str] = []
        lock = threading.Lock()
        start = threading.Barrier(8)

        def claim(store: PostgresStore) -> None:
            start.wait()
            while (row := store.claim_next_submission("s", lease=30)) is not None:
                with lock:
                    claimed.append(row.submission_id)

        threads = [threading.Thread(target=claim, args=(stores[i % 2],)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert [sid for sid, n in Counter(claimed).items() if n > 1] == []
        assert sorted(claimed) == sorted(f"sub{i}" for i in range(total))
        owners = {row.owner.id for row in stores[0].list_submissions("s") if row.owner is not None}
        assert owners <= {s.owner_id for s in stores} and len(owners) == 2  # both pools took some
    finally:
        for store in stores:
            store.close()


def test_in_order_claims_wait_for_the_running_one(schema: str) -> None:
    with PostgresStore(postgres_url(), schema=schema) as a, PostgresStore(postgres_url(), schema=schema) as b:
        a.create_submission("s", [user("u1")], submission_id="first")
        a.create_submission("s", [user("u2")], submission_id="second")
        first = a.claim_next_submission("s", in_order=True, lease=30)
        assert first is not None and first.submission_id == "first"
        assert b.claim_next_submission("s", in_order=True, lease=30) is None  # first still runs
        assert a.finish_submission("s", "first", "completed")
        second = b.claim_next_submission("s", in_order=True, lease=30)
        assert second is not None and second.submission_id == "second"


def test_the_schema_is_created_versioned_and_reopened(schema: str) -> None:
    import psycopg

    url = postgres_url()
    with PostgresStore(url, schema=schema) as store:
        store.append_messages("s", [user("u1")])
    with PostgresStore(url, schema=schema) as again:  # reopening migrates nothing, keeps the rows
        assert [m.id for m in again.list_messages("s")] == ["u1"]
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f'SELECT version FROM "{schema}".think_schema_version').fetchone()
        assert row is not None and row[0] == SCHEMA_VERSION
        conn.execute(f'UPDATE "{schema}".think_schema_version SET version = %s', (SCHEMA_VERSION + 1,))
    with pytest.raises(RuntimeError, match="newer than this code supports"):
        PostgresStore(url, schema=schema)


def test_a_url_opens_a_postgres_store_and_its_repr_hides_the_password() -> None:
    parts = urlsplit(postgres_url())
    # A server that checks passwords (bench/pg_local.sh starts one) gets its own; one that trusts
    # local connections accepts and ignores any.
    password = parts.password or "hunter2"
    with_password = parts._replace(netloc=f"{parts.username or 'postgres'}:{password}@{parts.hostname}:{parts.port}")
    store = open_store(with_password.geturl())
    try:
        assert isinstance(store, PostgresStore) and store.schema == "think"
        assert password not in repr(store) and "***" in repr(store)
    finally:
        store.close()


def test_without_the_extra_the_error_names_it() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "try:\n"
        "    import think_core.store.postgres\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install 'think-agent[postgres]'" in done.stdout, done.stdout + done.stderr


class TurnSpans:
    """When each turn held its session: from before_turn to its last step's end."""

    def __init__(self, name: str, spans: list[tuple[str, float, float]]) -> None:
        self.name = name
        self.spans = spans
        self._start = 0.0

    @hookimpl
    def before_turn(self, ctx: Any) -> None:
        self._start = time.monotonic()

    @hookimpl
    def on_step_finish(self, ctx: Any) -> None:
        self.spans.append((self.name, self._start, time.monotonic()))


async def test_two_agents_on_one_database_run_a_sessions_turns_one_at_a_time(schema: str) -> None:
    url = postgres_url()
    spans: list[tuple[str, float, float]] = []

    def agent(name: str) -> Think:
        model = ScriptedModel([Step(text="one two three four five six")] * 3, delay=0.05)
        return Think(model, store=PostgresStore(url, schema=schema), load_entrypoints=False,
                     plugins=[TurnSpans(name, spans)])

    a, b = agent("a"), agent("b")
    try:
        results = await asyncio.gather(
            a.session("shared").chat("from a"), b.session("shared").chat("from b"), a.session("shared").chat("again a")
        )
        assert [r.status for r in results] == ["completed"] * 3
        spans.sort(key=lambda span: span[1])
        assert len(spans) == 3
        for (_, _, end), (_, start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, f"turns of one session overlapped across agents: {spans}"
        messages = await a.session("shared").messages()
        assert [m.role for m in messages] == ["user", "assistant"] * 3  # never interleaved
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_turn_cancelled_while_another_agent_holds_the_session_frees_it(schema: str) -> None:
    url = postgres_url()
    started = asyncio.Event()

    class Started:
        @hookimpl
        def before_turn(self, ctx: Any) -> None:
            started.set()

    slow = Think(ScriptedModel([Step(text=" ".join(["word"] * 60))], delay=0.05),
                 store=PostgresStore(url, schema=schema), load_entrypoints=False, plugins=[Started()])
    other = Think(ScriptedModel(["quick"] * 2), store=PostgresStore(url, schema=schema), load_entrypoints=False)
    try:
        holder = asyncio.create_task(slow.session("s").chat("long"))
        await asyncio.wait_for(started.wait(), 30)
        waiting = asyncio.create_task(other.session("s").chat("blocked"))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # held up by the other agent's turn
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert (await holder).status == "completed"
        after = await asyncio.wait_for(other.session("s").chat("now"), 30)  # nothing left locked
        assert after.status == "completed" and after.text == "quick"
    finally:
        await slow.aclose()
        await other.aclose()
