"""A durable turn killed with SIGKILL resumes after its last durable step.

A real worker process (``bench/crash_worker.py``: durable ``submit_messages`` on a SQLite file,
a scripted model, an idempotent ``lookup`` and a non-idempotent ``record`` tool) kills itself
at a marked point of a turn; a second worker opens the session and drains it. The tools append
every execution to a file, so what ran twice is counted across both processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.crash import answers, crash_worker, run_worker, tool_log


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
