"""Eager recovery with real processes: a worker accepts a durable submission and is SIGKILLed
mid-turn while this process has the session open the whole time (``bench/recovery.py`` runs
the same rounds and reports the times). Nobody opens the session again: the open session takes
the submission over — at once when its owner was a process on this host, once the owner's
lease expired when the owner recorded another host — and answers it once. A process that has
only recovered (as ``think serve`` does), with the session open nowhere, takes it over too."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.postgres import drop_schema, postgres_url
from think_core.process_identity import this_process

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_recovery", ROOT / "bench" / "recovery.py")
assert _spec is not None and _spec.loader is not None
bench: Any = importlib.util.module_from_spec(_spec)
sys.modules["bench_recovery"] = bench
_spec.loader.exec_module(bench)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the worker and this process keep the session: a SQLite file, or a PostgreSQL schema."""
    if request.param == "sqlite":
        return str(tmp_path / "t.db")
    url, schema = postgres_url(), f"recovery_{uuid.uuid4().hex[:12]}"
    request.addfinalizer(lambda: drop_schema(url, schema))
    return f"{url}#{schema}"


async def _history(agent: Any) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in await agent.session(bench.SESSION).messages()]


async def test_a_dead_owner_on_this_host_is_recovered_without_waiting_for_its_lease(db: str) -> None:
    lease = 120.0  # far longer than the test may wait: only seeing the owner gone can recover it in time
    agent, recovery = await bench.kill_and_recover(db, lease, None, deadline=60.0)
    try:
        before, after = recovery.before_kill, recovery.after
        me = this_process()
        # What inspect_submission showed while the worker ran: who it was, and until when.
        assert before.owner is not None and before.owner.host == socket.gethostname() and before.owner.pid != os.getpid()
        assert before.owner.started is not None and before.owner.namespace == me.namespace
        assert before.lease_expires_at == before.heartbeat_at + lease
        assert after.status == "completed" and after.completed_at < before.lease_expires_at
        assert after.owner == agent.store.submission_owner()
        assert await _history(agent) == [("user", "question"), ("assistant", bench.RECOVERED_ANSWER)]
    finally:
        await agent.aclose()


async def test_a_foreign_owner_is_recovered_once_its_lease_expired_and_not_before(db: str) -> None:
    lease = 3.0
    agent, recovery = await bench.kill_and_recover(db, lease, "another-machine", deadline=60.0)
    try:
        before, after = recovery.before_kill, recovery.after
        assert before.owner is not None and before.owner.host == "another-machine"
        assert before.lease_expires_at is not None
        # Its death cannot be seen from here: the lease alone decides (it may have been renewed
        # once more after it was read, so the takeover is at its expiry as read or later).
        assert after.status == "completed" and after.completed_at >= before.lease_expires_at
        assert after.owner == agent.store.submission_owner()
        assert await _history(agent) == [("user", "question"), ("assistant", bench.RECOVERED_ANSWER)]
    finally:
        await agent.aclose()


async def test_a_dead_owner_of_a_session_open_nowhere_is_taken_over_by_a_recovering_process(db: str) -> None:
    lease = 120.0  # only the sweep seeing the owner gone can recover it in time
    agent, recovery = await bench.kill_and_recover(db, lease, None, deadline=60.0, open_here=False)
    try:
        before, after = recovery.before_kill, recovery.after
        assert before.owner is not None and before.owner.pid != os.getpid()
        assert after.status == "completed" and after.completed_at < before.lease_expires_at
        assert after.owner == agent.store.submission_owner()
        assert await _history(agent) == [("user", "question"), ("assistant", bench.RECOVERED_ANSWER)]
    finally:
        await agent.aclose()


def _accept_and_vanish(db: Path, session_id: str, text: str) -> str:
    """What a process that accepted a submission and died before claiming it leaves behind."""
    from think_core.store import SQLiteStore
    from think_core.types import UIMessage

    with SQLiteStore(db) as store:
        row, _ = store.create_submission(
            session_id, [UIMessage(id=f"{session_id}-{text}", role="user", parts=[{"type": "text", "text": text}])]
        )
    return row.submission_id


async def test_a_submission_accepted_elsewhere_and_never_claimed_is_run_by_the_open_session(tmp_path: Path) -> None:
    from think_core import Think
    from think_core.models.scripted import ScriptedModel, Step

    db = tmp_path / "t.db"
    agent = Think(ScriptedModel([Step(text="picked up")]), store=str(db), load_entrypoints=False, submission_lease=30.0)
    try:
        session = agent.session("s")
        await session.open()  # open, and idle: nothing to drain yet
        sid = _accept_and_vanish(db, "s", "orphan")
        done = await session.wait_for_submission(sid, timeout=30)
        assert done.status == "completed" and done.owner == agent.store.submission_owner()
        assert [(m.role, m.text) for m in await session.messages()] == [("user", "orphan"), ("assistant", "picked up")]
    finally:
        await agent.aclose()


async def test_recover_on_start_resumes_every_session_a_few_at_a_time(tmp_path: Path) -> None:
    import asyncio

    from think_core import Think, hookimpl
    from think_core.models.scripted import ScriptedModel, Step

    db = tmp_path / "t.db"
    waiting = {sid: _accept_and_vanish(db, sid, "left behind") for sid in ("a", "b", "c")}

    class Concurrency:
        """Each turn waits (up to 10 s) until two run at once, so the most seen is exactly the
        limit whatever the machine's speed."""

        def __init__(self) -> None:
            self.now = self.most = 0
            self.two = asyncio.Event()

        @hookimpl
        async def before_turn(self, ctx: Any) -> None:
            self.now += 1
            self.most = max(self.most, self.now)
            if self.now >= 2:
                self.two.set()
            try:
                await asyncio.wait_for(self.two.wait(), 10)
            except TimeoutError:
                pass

        @hookimpl
        def on_chat_response(self, result: Any) -> None:
            self.now -= 1

    counter = Concurrency()
    agent = Think(ScriptedModel([Step(text="resumed")], repeat=True), store=str(db), plugins=[counter],
                  load_entrypoints=False, recover_on_start=True, recovery_concurrency=2)
    async with agent:  # nothing else is asked of it: starting is enough
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while set(await asyncio.to_thread(_unfinished_sessions, db)):
            assert loop.time() < deadline, "the sessions were not resumed"
            await asyncio.sleep(0.1)
        for sid, submission_id in waiting.items():
            row = await agent.session(sid).inspect_submission(submission_id)
            assert row is not None and row.status == "completed"
            assert [m.text for m in await agent.session(sid).messages()] == ["left behind", "resumed"]
        assert await agent.recover() == []  # nothing left
    assert counter.most == 2  # two sessions at a time, never all three


def _unfinished_sessions(db: Path) -> list[str]:
    from think_core.store import SQLiteStore

    with SQLiteStore(db) as store:
        return store.pending_session_ids()
