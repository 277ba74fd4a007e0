"""Durability under concurrency: leases across processes (here: agents on one file),
cancellation between a write and its follow-up, and a closed store."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Callable

import pytest

from tests.support.postgres import drop_schema, postgres_url
from think_core import hookimpl
from think_core.agent import Think
from think_core.durable.crash_recovery import recover_submissions
from think_core.models.scripted import ScriptedModel, Step
from think_core.store import SQLiteStore, Store
from think_core.types import UIMessage


@pytest.fixture(params=["sqlite", "postgresql"])
def open_db(request: pytest.FixtureRequest, tmp_path) -> Callable[[], Store]:
    """Stores over one database (a new one each call, as separate processes have): a SQLite
    file, or a PostgreSQL schema of the test's own."""
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "shared.db")
    from think_core.store.postgres import PostgresStore

    url, schema = postgres_url(), f"durability_{uuid.uuid4().hex[:12]}"
    request.addfinalizer(lambda: drop_schema(url, schema))
    return lambda: PostgresStore(url, schema=schema)


def test_recovering_a_submission_takes_its_lease(tmp_path):
    db = str(tmp_path / "lease.db")
    with SQLiteStore(db) as first, SQLiteStore(db) as second:
        sub, _ = first.create_submission("s", [UIMessage(id="u1", role="user", parts=[{"type": "text", "text": "x"}])])
        first.claim_next_submission("s")
        first.apply_submission_messages("s", sub.submission_id)
        # The process that claimed it died long ago: its lease is stale.
        first._conn.execute("UPDATE submissions SET heartbeat_at = 0, started_at = 0")
        first._conn.commit()
        assert [r.submission_id for r in recover_submissions(first, "s", stale_after=30)] == [sub.submission_id]
        assert recover_submissions(second, "s", stale_after=30) == []  # the first recoverer owns it now


async def test_an_accepted_submission_is_drained_even_if_the_caller_was_cancelled(tmp_path):
    db = tmp_path / "cancel.db"
    agent = Think(ScriptedModel(["answered"]), store=str(db), load_entrypoints=False)
    session = agent.session("s")
    await session.open()
    locker = sqlite3.connect(db)
    locker.execute("BEGIN EXCLUSIVE")  # the write waits on the lock, on the store's thread
    submit = asyncio.create_task(session.submit_messages("hello", idempotency_key="k"))
    await asyncio.sleep(0.1)
    submit.cancel()
    locker.rollback()
    locker.close()
    with pytest.raises(asyncio.CancelledError):
        await submit
    again = await session.submit_messages("hello", idempotency_key="k")
    assert again.accepted is False  # the cancelled call's write went through
    done = await session.wait_for_submission(again.submission_id, timeout=5)
    assert done.status == "completed"
    assert [m.text for m in await session.messages()] == ["hello", "answered"]
    await agent.aclose()


async def test_waiting_for_a_submission_another_agent_runs(open_db):
    """The watcher waits for the runner, which keeps its submission: a lease of seconds (renewed
    from a thread every third of it) never runs out under a busy machine's delays, and the
    runner — alive, in this very process — is never taken for a dead owner."""
    runner = Think(ScriptedModel([Step(text="slow answer")], delay=0.05), store=open_db(), load_entrypoints=False,
                   submission_lease=10.0)
    accepted = await runner.session("s").submit_messages("work")
    # Any process that opens a session drains it: wait until the runner has claimed this one.
    while (await runner.session("s").inspect_submission(accepted.submission_id)).status != "running":
        await asyncio.sleep(0.01)
    watcher = Think(ScriptedModel([]), store=open_db(), load_entrypoints=False, submission_lease=10.0)
    done = await watcher.session("s").wait_for_submission(accepted.submission_id, timeout=30)
    assert done.status == "completed"
    assert done.owner == runner.store.submission_owner()  # never taken over by the watcher
    assert [(m.role, m.text) for m in await watcher.session("s").messages()] == [("user", "work"), ("assistant", "slow answer")]
    await runner.aclose()
    await watcher.aclose()


async def test_a_cancelled_first_open_does_not_break_callers_waiting_on_it():
    class SlowConfigure:
        name = "slow_configure"

        @hookimpl
        async def configure_session(self, session):
            await asyncio.sleep(0.1)

    agent = Think(ScriptedModel(["one", "two"]), plugins=[SlowConfigure()], load_entrypoints=False)
    session = agent.session("s")
    first = asyncio.create_task(session.chat("first"))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(session.chat("second"))
    await asyncio.sleep(0.01)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (await asyncio.wait_for(second, 5)).status == "completed"


async def test_a_closed_agent_refuses_store_calls(open_db):
    agent = Think(ScriptedModel(["x"]), store=open_db(), load_entrypoints=False)
    session = agent.session("s")
    await session.chat("hi")
    await agent.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await session.messages()
