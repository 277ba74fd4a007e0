"""Eager recovery with real processes: a worker accepts a durable submission and is SIGKILLed
mid-turn while this process has the session open the whole time (``bench/recovery.py`` runs
the same rounds and reports the times). Nobody opens the session again: the open session takes
the submission over — at once when its owner was a process on this host, once the owner's
lease expired when the owner recorded another host — and answers it once."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from pathlib import Path
from typing import Any

from think_core.process_identity import this_process

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_recovery", ROOT / "bench" / "recovery.py")
assert _spec is not None and _spec.loader is not None
bench: Any = importlib.util.module_from_spec(_spec)
sys.modules["bench_recovery"] = bench
_spec.loader.exec_module(bench)


async def _history(agent: Any) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in await agent.session(bench.SESSION).messages()]


async def test_a_dead_owner_on_this_host_is_recovered_without_waiting_for_its_lease(tmp_path: Path) -> None:
    lease = 120.0  # far longer than the test may wait: only seeing the owner gone can recover it in time
    agent, recovery = await bench.kill_and_recover(str(tmp_path / "t.db"), lease, None, deadline=60.0)
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


async def test_a_foreign_owner_is_recovered_once_its_lease_expired_and_not_before(tmp_path: Path) -> None:
    lease = 3.0
    agent, recovery = await bench.kill_and_recover(str(tmp_path / "t.db"), lease, "another-machine", deadline=60.0)
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
