"""A recovering agent (``recover_on_start``, ``think serve``) takes over what dead owners left in
sessions it never opened: a running submission whose owner's lease expired, a pending one whose
accepting process died before claiming it — a bounded number of sessions at a time, with one
INFO line per takeover saying from whom and how late.

The dead owners are stores that claimed or accepted a row and were closed (what a killed process
leaves in the store); the multi-process version, with SIGKILLed ``think serve`` processes, is
``tests/server/test_cluster_takeover.py``."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.postgres import drop_schema, postgres_url
from think_core import Think, hookimpl
from think_core.models.scripted import ScriptedModel, Step
from think_core.store import SQLiteStore, Store, Submission
from think_core.types import UIMessage

ANSWER = "Taken over."
DEADLINE = 30.0  # seconds: generous; the leases here are 1-2 s

StoreFactory = Callable[..., Store]


@pytest.fixture(params=["sqlite", "postgresql"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Stores over one database (a SQLite file, or a fresh PostgreSQL schema); ``host=`` names
    the machine recorded as the owner of what the store claims."""
    if request.param == "sqlite":
        yield lambda host=None: SQLiteStore(tmp_path / "t.db", host=host)
        return
    from think_core.store.postgres import PostgresStore

    url, schema = postgres_url(), f"sweep_{uuid.uuid4().hex[:12]}"
    yield lambda host=None: PostgresStore(url, schema=schema, host=host)
    drop_schema(url, schema)


def question(session_id: str) -> UIMessage:
    return UIMessage(id=f"{session_id}-q", role="user", parts=[{"type": "text", "text": f"question of {session_id}"}])


def die_holding(stores: StoreFactory, session_id: str, *, lease: float) -> str:
    """A process on another machine accepted and started a submission, then died: its lease
    runs out ``lease`` seconds later and nothing here can see it die sooner."""
    with stores(host="another-machine") as dead:
        row, _ = dead.create_submission(session_id, [question(session_id)])
        assert dead.claim_next_submission(session_id, in_order=True, lease=lease) is not None
    return row.submission_id


def die_before_claiming(stores: StoreFactory, session_id: str) -> str:
    """A process accepted a submission and died before claiming it."""
    with stores() as dead:
        row, _ = dead.create_submission(session_id, [question(session_id)])
    return row.submission_id


async def finished(store: Store, session_id: str, submission_id: str) -> Submission:
    """The row once final, read from the store: the test never opens the session itself."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while True:
        row = await asyncio.to_thread(store.get_submission, session_id, submission_id)
        assert row is not None
        if row.status not in ("pending", "running"):
            return row
        assert loop.time() < deadline, f"{submission_id} of {session_id} was never taken over: {row}"
        await asyncio.sleep(0.1)


async def logged(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    """The log lines that start with ``start``, once there is one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not (lines := [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]):
        assert loop.time() < deadline, f"nothing logged starting with {start!r}"
        await asyncio.sleep(0.1)
    return lines


def recovering_agent(store: Store, **kwargs: Any) -> Think:
    return Think(ScriptedModel([Step(text=ANSWER)], repeat=True), store=store, load_entrypoints=False,
                 recover_on_start=True, **kwargs)


async def test_an_expired_lease_in_a_session_nobody_has_open_is_taken_over_and_logged(
    stores: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="think")
    async with recovering_agent(stores()) as agent:  # started on an empty store: start-up recovery finds nothing
        assert agent.sessions == {}
        submission_id = die_holding(stores, "left", lease=1.5)
        before = await asyncio.to_thread(agent.store.get_submission, "left", submission_id)
        assert before is not None and before.lease_expires_at is not None
        done = await finished(agent.store, "left", submission_id)
        assert done.status == "completed" and done.owner == agent.store.submission_owner()
        assert done.completed_at is not None and done.completed_at >= before.lease_expires_at
        assert [(m.role, m.text) for m in await agent.session("left").messages()] == [
            ("user", "question of left"), ("assistant", ANSWER)
        ]
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("took over")]
    assert line.startswith(f"took over submission {submission_id} of session left from another-machine pid ")
    assert "its lease expired " in line and " s ago" in line and "after its last heartbeat" in line


async def test_a_submission_whose_accepting_process_died_before_claiming_it_is_run(
    stores: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="think")
    async with recovering_agent(stores()) as agent:
        submission_id = die_before_claiming(stores, "unclaimed")
        done = await finished(agent.store, "unclaimed", submission_id)
        assert done.status == "completed" and done.owner == agent.store.submission_owner()
        assert [m.text for m in await agent.session("unclaimed").messages()] == ["question of unclaimed", ANSWER]
        lines = await logged(caplog, "picked up")  # said once the watch sees the claim, a look later
    assert len(lines) == 1 and lines[0].startswith(f"picked up submission {submission_id} of session unclaimed: claimed ")


async def test_an_agent_that_does_not_recover_leaves_sessions_it_never_opened_alone(stores: StoreFactory) -> None:
    agent = Think(ScriptedModel([Step(text=ANSWER)]), store=stores(), load_entrypoints=False)
    try:
        await agent.session("mine").open()  # it watches what it has open, nothing else
        submission_id = die_holding(stores, "other", lease=0.5)
        await asyncio.sleep(2.0)  # four lease lengths, many looks
        row = await asyncio.to_thread(agent.store.get_submission, "other", submission_id)
        assert row is not None and row.status == "running" and row.owner is not None
        assert row.owner.host == "another-machine"
    finally:
        await agent.aclose()


class Overlap:
    """Counts the turns running at once; each turn lasts a little, so takeovers overlap when
    the sweep starts several."""

    def __init__(self) -> None:
        self.now = self.most = 0

    @hookimpl
    async def before_turn(self, ctx: Any) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.3)

    @hookimpl
    def on_chat_response(self, result: Any) -> None:
        self.now -= 1


async def test_the_sweep_takes_a_bounded_number_of_sessions_at_a_time(stores: StoreFactory) -> None:
    overlap = Overlap()
    async with recovering_agent(stores(), plugins=[overlap], recovery_concurrency=2) as agent:
        left = {f"s{i}": die_holding(stores, f"s{i}", lease=1.0) for i in range(8)}
        for session_id, submission_id in left.items():
            done = await finished(agent.store, session_id, submission_id)
            assert done.status == "completed", done
        assert agent.store.unfinished_submissions() == []
    assert 1 <= overlap.most <= 2  # never more than recovery_concurrency sessions at once
