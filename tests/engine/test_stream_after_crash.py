"""A durable turn's stream survives its process: killed with SIGKILL after a finished step and
resumed by another process, the turn's stored stream still shows the whole answer from its
first word, once, for a reader on another store instance (another server process)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.crash import answers, crash_worker, run_worker
from think_core.store import SQLiteStore


def _text(chunks: list[dict]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


def test_the_stream_of_a_turn_resumed_after_sigkill_shows_the_whole_answer(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    run_worker(db, 1, point="step_finished")  # killed once step 0 is journaled
    with SQLiteStore(db) as store:
        cut = store.get_stream("s")
        assert cut is not None and cut.status == "streaming"  # its process died mid-turn
    run_worker(db, 1)  # another process resumes the turn after its last finished step
    [answer] = answers(db)
    with SQLiteStore(db) as store:  # what a page opened now (on any server) is replayed
        info = store.get_stream("s", cut.stream_id)
        assert info is not None and info.status == "completed"
        chunks = [json.loads(b) for b in store.stream_chunks("s", info.stream_id)]
    assert [c["type"] for c in chunks].count("start") == 1 and chunks[0] == {"type": "start", "messageId": answer.id}
    assert _text(chunks) == answer.text  # from the first word of step 0 to the end
    assert [c["type"] for c in chunks].count("start-step") == [p["type"] for p in answer.parts].count("step-start")
    outputs = {c["toolCallId"]: c["output"] for c in chunks if c["type"] == "tool-output-available"}
    stored = {p["toolCallId"]: p["output"] for p in answer.parts if p.get("state") == "output-available"}
    assert outputs == stored and outputs  # each tool's result once, as stored
    assert crash_worker.audit(str(db), "s", 1)["problems"] == []
