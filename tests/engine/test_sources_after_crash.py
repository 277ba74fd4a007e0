"""A step's sources are journaled with it: a durable turn whose process is SIGKILLed after its
cited first step resumes in another process with that step's ``sources`` in the next step's
``ctx.steps``, and the stored answer keeps its ``source-url`` parts (real processes, a SQLite
file, Claude on the loopback server)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from tests.loopback import LoopbackServer, RecordedRequest, Reply
from tests.support import cited
from tests.support.cited import LAB, NEWS
from tests.support.serve import ROOT
from tests.support.wire import an_stream
from think_core.store import SQLiteStore

TIMEOUT = 120


def claude(request: RecordedRequest) -> Reply:
    """The cited first step calling ``lookup``; once the lookup's result is in, the last step."""
    if "tool_result" in json.dumps(request.json["messages"]):
        return Reply.sse(an_stream({"type": "text", "text": "Done."}, stop="end_turn", input_tokens=9, output_tokens=2))
    return Reply.sse(cited.anthropic_web_search(call=("toolu_1", "lookup", {"query": "qubits"})))


async def worker(loopback: LoopbackServer, db: Path, log: Path, *crash: str) -> int:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.engine._cited_worker", loopback.url, str(db), str(log), *crash,
        cwd=ROOT, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert process.returncode == (-signal.SIGKILL if crash else 0), err.decode()
    return process.returncode


async def test_a_cited_step_replayed_after_sigkill_keeps_its_sources(tmp_path: Path, loopback: LoopbackServer) -> None:
    loopback.handler = claude
    db, log = tmp_path / "chats.db", tmp_path / "steps.jsonl"
    await worker(loopback, db, log, "--crash")
    await worker(loopback, db, log)
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    first, second = seen[0]["pid"], seen[-1]["pid"]
    cited_pages = [["url", *NEWS], ["url", *LAB]]
    assert [(s["pid"], s["step"], s["sources"]) for s in seen] == [(first, 0, []), (second, 1, cited_pages)]
    assert first != second
    assert len(loopback.requests) == 2  # the cited step was not asked again
    with SQLiteStore(str(db)) as store:
        [answer] = [m for m in store.list_messages("s") if m.role == "assistant"]
    assert [(p["url"], p["title"]) for p in answer.parts if p["type"] == "source-url"] == [NEWS, LAB]
    assert answer.text.endswith("Done.")
