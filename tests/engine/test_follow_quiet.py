"""A follower of a durable submission looks at its row only after ``OWNER_CHECK`` seconds without
a chunk: a live stream's chunks never make it read the store, a turn that ended elsewhere ends
the follower after one quiet spell, and a closed follower leaves no timer behind.

Against a real SQLite store; the row reads are counted at the store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from think_core.durable import queue as queue_module
from think_core.durable.queue import _DONE, OWNER_CHECK, SubmissionQueue
from think_core.store import SQLiteStore
from think_core.store.aio import AsyncStore
from think_core.types import UIMessage

SESSION = "s"
DEADLINE = 30.0


class CountingStore(AsyncStore):
    """The engine's store facade, counting the submission rows read."""

    def __init__(self, path: Path) -> None:
        super().__init__(SQLiteStore(str(path)))
        self.reads = 0

    async def get_submission(self, session_id: str, submission_id: str) -> Any:
        self.reads += 1
        return await super().get_submission(session_id, submission_id)


def user(text: str) -> UIMessage:
    return UIMessage(id=f"m-{text}", role="user", parts=[{"type": "text", "text": text}])


async def queue_with(db: CountingStore) -> SubmissionQueue:
    async def never(request: Any) -> Any:
        raise AssertionError("no turn runs here")

    return SubmissionQueue(SESSION, db, lease=30.0, run_turn=never, cancel=lambda sid: False)


async def running_submission(db: CountingStore) -> str:
    row, _ = await db.create_submission(SESSION, [user("hi")])
    claimed = await db.claim_next_submission(SESSION, lease=30.0)
    assert claimed is not None and claimed.submission_id == row.submission_id
    return row.submission_id


@contextlib.asynccontextmanager
async def followed(tmp_path: Path) -> AsyncIterator[tuple[CountingStore, SubmissionQueue, str, asyncio.Queue[Any]]]:
    """A running submission of a real store, its queue and a listener of it."""
    db = CountingStore(tmp_path / "s.db")
    try:
        submissions = await queue_with(db)
        sid = await running_submission(db)
        yield db, submissions, sid, submissions.listen(sid)
    finally:
        db.shutdown()


async def test_a_live_stream_never_makes_its_follower_read_the_row(tmp_path: Path) -> None:
    async with followed(tmp_path) as (db, submissions, sid, listener):
        sent = [{"type": "text-delta", "delta": str(i)} for i in range(int(3 * OWNER_CHECK / 0.05))]

        async def emit() -> None:  # a chunk every 50 ms for three quiet spells' time
            for chunk in sent:
                await asyncio.sleep(0.05)
                listener.put_nowait(chunk)
            listener.put_nowait(_DONE)

        emitting = asyncio.create_task(emit())
        got = [chunk async for chunk in submissions.follow(sid, listener)]
        await emitting
        assert got == sent
        assert db.reads == 0


async def test_a_turn_that_ended_elsewhere_ends_its_follower_after_one_quiet_spell(tmp_path: Path) -> None:
    async with followed(tmp_path) as (db, submissions, sid, listener):
        listener.put_nowait({"type": "start"})
        loop = asyncio.get_running_loop()
        started = loop.time()
        follower = submissions.follow(sid, listener)
        assert await anext(follower) == {"type": "start"}
        assert await db.finish_submission(SESSION, sid, "completed")  # another process answered it
        rest = await asyncio.wait_for(_rest(follower), DEADLINE)
        assert rest == []
        assert loop.time() - started >= OWNER_CHECK * 0.9
        assert db.reads == 1


async def test_a_quiet_spell_of_a_running_turn_is_looked_at_and_followed_on(tmp_path: Path) -> None:
    async with followed(tmp_path) as (db, submissions, sid, listener):
        follower = submissions.follow(sid, listener)
        waiting = asyncio.create_task(anext(follower))
        deadline = asyncio.get_running_loop().time() + DEADLINE
        while db.reads < 2:  # two quiet spells, each a look at the row (still running: go on)
            assert asyncio.get_running_loop().time() < deadline, db.reads
            await asyncio.sleep(0.05)
        assert not waiting.done()
        listener.put_nowait({"type": "text-delta", "delta": "late"})
        assert await asyncio.wait_for(waiting, DEADLINE) == {"type": "text-delta", "delta": "late"}
        listener.put_nowait(_DONE)
        assert await asyncio.wait_for(_rest(follower), DEADLINE) == []


async def test_a_closed_follower_leaves_no_timer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    armed: list[Any] = []

    class Watched(queue_module._QuietTimer):
        def __init__(self, queue: asyncio.Queue[Any]) -> None:
            super().__init__(queue)
            armed.append(self)

    monkeypatch.setattr(queue_module, "_QuietTimer", Watched)
    async with followed(tmp_path) as (db, submissions, sid, listener):
        listener.put_nowait({"type": "start"})
        follower = submissions.follow(sid, listener)
        assert await anext(follower) == {"type": "start"}
        await follower.aclose()
        [timer] = armed
        assert timer._handle is None
        await asyncio.sleep(OWNER_CHECK * 2)
        assert listener.empty() and db.reads == 0


async def _rest(follower: Any) -> list[Any]:
    return [chunk async for chunk in follower]
