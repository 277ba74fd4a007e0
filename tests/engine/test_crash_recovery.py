"""A durable turn killed with SIGKILL resumes after its last durable step.

A real worker process (``bench/crash_worker.py``: durable ``submit_messages`` on a SQLite file,
a scripted model, an idempotent ``lookup`` and a non-idempotent ``record`` tool) kills itself
at a marked point of a turn; a second worker opens the session and drains it. The tools append
every execution to a file, so what ran twice is counted across both processes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "bench" / "crash_worker.py"
LEASE = "2"  # seconds: the second worker waits for the dead one's lease to expire

_spec = importlib.util.spec_from_file_location("crash_worker", WORKER)
assert _spec is not None and _spec.loader is not None
crash_worker: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_worker)


def run_worker(db: Path, messages: int, **crash: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THINK_CRASH_")}
    env.update({f"THINK_CRASH_{k.upper()}": v for k, v in crash.items()})
    done = subprocess.run(
        [sys.executable, str(WORKER), str(db), "s", str(messages), "--lease", LEASE],
        env=env, capture_output=True, text=True, timeout=300,
    )
    if crash:
        assert done.returncode == -signal.SIGKILL, done.stderr
    else:
        assert done.returncode == 0, done.stderr
    return done.returncode


def tool_log(db: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(f"{db}.tools").read_text().splitlines()]


def answers(db: Path) -> list[Any]:
    with crash_worker.SQLiteStore(str(db)) as store:
        return [m for m in store.list_messages("s") if m.role == "assistant"]


def assert_exactly_once(report: dict[str, Any]) -> None:
    assert report["problems"] == []
    assert (report["lost"], report["answered_twice"], report["wrong"], report["reexecuted"], report["malformed"]) == (
        0, 0, 0, 0, 0
    )


def test_a_non_idempotent_tool_cut_off_mid_call_is_reported_as_interrupted_not_run_again(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    run_worker(db, 2, point="tool_started", tool="record")
    run_worker(db, 2)
    report = crash_worker.audit(str(db), "s", 2)
    assert_exactly_once(report)
    assert report["effects"]["record\tmessage 0"] == 1  # it ran once, in the process that died
    assert report["interrupted"] == 1
    [seen] = [e for e in tool_log(db) if e["call"] == "message_0_record"]
    assert seen["success"] is False and seen["interrupted"] is True  # after_tool_call saw the outcome
    answer = answers(db)[0]
    assert "record gave The tool call was interrupted" in answer.text  # the model was told


def test_an_idempotent_tool_cut_off_mid_call_runs_again_once(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    run_worker(db, 2, point="tool_started", tool="lookup")
    run_worker(db, 2)
    report = crash_worker.audit(str(db), "s", 2)
    assert_exactly_once(report)
    assert report["interrupted"] == 0
    assert report["effects"]["lookup\tmessage 0"] == 2  # cut off, then run again once
    assert report["effects"]["record\tmessage 0"] == 1
    assert [e["interrupted"] for e in tool_log(db) if e["call"] == "message_0_lookup"] == [False]


def test_stored_tool_results_are_reused_after_a_crash(tmp_path: Path) -> None:
    """Killed once step 0 (lookup) has finished: recovery neither runs lookup again nor re-asks step 0."""
    db = tmp_path / "t.db"
    run_worker(db, 1, point="step_finished")
    run_worker(db, 1)
    report = crash_worker.audit(str(db), "s", 1)
    assert_exactly_once(report)
    assert report["effects"] == {"lookup\tmessage 0": 1, "record\tmessage 0": 1}
    answer = answers(db)
    assert len(answer) == 1 and answer[0].text.startswith("Looking up message 0 first.Now recording it.")
