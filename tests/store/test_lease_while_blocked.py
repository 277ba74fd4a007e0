"""A sync hook that blocks the event loop does not let the submission's lease expire: the
lease is renewed from a thread, so another process never retakes (and re-runs) the turn."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from think_core.agent import Think
from think_core.models.scripted import ScriptedModel
from think_core.store import SQLiteStore

WORKER = textwrap.dedent(
    """
    import asyncio, pathlib, sys, time
    from think_core import hookimpl
    from think_core.agent import Think
    from think_core.models.scripted import ScriptedModel

    marker = pathlib.Path(sys.argv[2])

    class BlockingHook:
        @hookimpl
        def before_turn(self, ctx):
            with marker.open("a") as f:
                f.write("blocking\\n")
            time.sleep(3)  # a sync hook blocking the whole event loop

    async def main():
        agent = Think(ScriptedModel(["answered once"]), store=sys.argv[1], plugins=[BlockingHook()],
                      load_entrypoints=False, submission_lease=1.0)
        session = agent.session("blocked")
        accepted = await session.submit_messages("hello", submission_id="sub-1")
        done = await session.wait_for_submission(accepted.submission_id, timeout=60)
        print(done.status, flush=True)
        await agent.aclose()

    asyncio.run(main())
    """
)


async def test_a_blocking_sync_hook_does_not_let_another_process_retake_the_submission(tmp_path: Path) -> None:
    db, marker = tmp_path / "lease.db", tmp_path / "marker"
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(db), str(marker)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "THINK_PLUGINS": ""},
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert worker.poll() is None, "the worker ended before its hook ran"
            assert time.monotonic() < deadline, "the worker never reached its blocking hook"
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.8)  # the hook is still blocking, and longer than the 1 s lease
        probe = SQLiteStore(db)
        try:
            assert probe.retake_stale_submissions("blocked", stale_after=1.0) == []  # the lease is fresh
            assert probe.get_submission("blocked", "sub-1").status == "running"
        finally:
            probe.close()
        # A second agent opening the session now must leave the running submission alone too.
        other = Think(ScriptedModel(["a second answer"]), store=str(db), load_entrypoints=False, submission_lease=1.0)
        await other.session("blocked").open()
        out, _ = await asyncio.to_thread(worker.communicate, timeout=60)
        assert out.strip() == "completed"
        messages = await other.session("blocked").messages()
        assert [(m.role, m.parts[-1].get("text")) for m in messages] == [("user", "hello"), ("assistant", "answered once")]
        assert marker.read_text() == "blocking\n"  # the turn ran once
        await other.aclose()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
