"""``think submissions``: what is running, pending or orphaned across a store (a SQLite file or a
PostgreSQL database, as ``--db`` names it), read by the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from think_core.store import open_store
from think_core.types import UIMessage


def think_bare(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")}
    done = subprocess.run([sys.executable, "-m", "think_core.cli", *args], capture_output=True, text=True,
                          timeout=120, env=environ)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def questions(n: int) -> list[UIMessage]:
    return [UIMessage(id=f"m{n}", role="user", parts=[{"type": "text", "text": f"question {n}"}])]


def test_running_orphaned_unclaimed_and_queued_submissions_across_sessions(db: str) -> None:
    with open_store(db) as dead:  # a machine that died holding a lease that is over now
        dead.create_submission("gone", questions(1), submission_id="expired")
        dead.claim_next_submission("gone", lease=0.001)
        dead.create_submission("gone", questions(2), submission_id="behind")
    store = open_store(db)
    try:
        store.create_submission("live", questions(3), submission_id="held")
        store.claim_next_submission("live", lease=600.0)  # this process: alive, its lease long
        store.create_submission("new", questions(4), submission_id="next")
        store.create_submission("done", questions(5), submission_id="finished")
        store.finish_submission("done", "finished", "completed")

        listed = think_bare("submissions", "--db", db, "--json")
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert [(r["session"], r["submission"], r["state"]) for r in rows] == [
            ("gone", "expired", "orphaned"), ("gone", "behind", "queued"), ("live", "held", "running"),
            ("new", "next", "unclaimed"),
        ]
        assert rows[0]["lease_left"] < 0 and rows[2]["lease_left"] > 500
        assert rows[2]["owner"] == f"{store.submission_owner().host} pid {os.getpid()}"

        lines = think_bare("submissions", "--db", db).stdout.splitlines()
        assert lines[0] == "1 running, 1 orphaned, 1 unclaimed, 1 queued"
        assert lines[1].startswith("orphaned ") and "lease expired" in lines[1]
        assert lines[3].startswith("running ") and "lease ends in" in lines[3]
    finally:
        store.close()


def test_an_empty_store_says_so(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    open_store(str(db)).close()
    done = think_bare("submissions", "--db", str(db))
    assert done.returncode == 0 and done.stdout.startswith("no submission running or pending in ")
    missing = think_bare("submissions", "--db", str(tmp_path / "none.db"))
    assert missing.returncode == 1 and "no conversations stored yet" in missing.stderr
