"""A step's sources and generated files are journaled with it: a durable turn whose process is
SIGKILLed after its cited (or drawn) first step resumes in another process with that step's
``sources`` (``files``) in the next step's ``ctx.steps``, and the stored answer keeps its
``source-url`` (``file``) parts; an image's bytes are journaled once per entry, in the answer's
part, not again in the step (real processes, a SQLite file, Claude and Gemini on the loopback
server)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from tests.loopback import LoopbackServer, RecordedRequest, Reply
from tests.support import cited
from tests.support.cited import LAB, NEWS, PNG_1X1
from tests.support.gemini import chunk, crlf_stream
from tests.support.serve import ROOT
from tests.support.wire import an_stream
from think_core.store import SQLiteStore

TIMEOUT = 120


def claude(request: RecordedRequest) -> Reply:
    """The cited first step calling ``lookup``; once the lookup's result is in, the last step."""
    if "tool_result" in json.dumps(request.json["messages"]):
        return Reply.sse(an_stream({"type": "text", "text": "Done."}, stop="end_turn", input_tokens=9, output_tokens=2))
    return Reply.sse(cited.anthropic_web_search(call=("toolu_1", "lookup", {"query": "qubits"})))


def gemini(request: RecordedRequest) -> Reply:
    """A drawing whose step calls ``lookup``; once the lookup's result is in, the last step."""
    if "functionResponse" in json.dumps(request.json["contents"]):
        return Reply.sse(crlf_stream(chunk({"text": "Done."}, finish="STOP", usage=(9, 2, 0))))
    return Reply.sse(crlf_stream(
        chunk({"text": "Here is your pixel."}),
        chunk({"inlineData": {"mimeType": "image/png", "data": PNG_1X1}},
              {"functionCall": {"name": "lookup", "args": {"query": "pixel"}}}, finish="STOP", usage=(8, 1290, 0)),
    ))


async def worker(loopback: LoopbackServer, db: Path, log: Path, *flags: str) -> int:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.engine._cited_worker", loopback.url, str(db), str(log), *flags,
        cwd=ROOT, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert process.returncode == (-signal.SIGKILL if "--crash" in flags else 0), err.decode()
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


async def test_a_drawn_step_replayed_after_sigkill_keeps_its_image_journaled_once(tmp_path: Path, loopback: LoopbackServer) -> None:
    loopback.handler = gemini
    db, log = tmp_path / "chats.db", tmp_path / "steps.jsonl"
    await worker(loopback, db, log, "--crash", "--gemini")
    with SQLiteStore(str(db)) as store:
        [submission] = store.list_submissions("s")
        journal = store.submission_journal("s", submission.submission_id)
    written = [entry for entry in journal if entry.kind in ("streamed", "step")]
    assert [entry.kind for entry in written] == ["streamed", "step"]
    for entry in written:  # the step and the answer's parts so far: the image's bytes once
        assert json.dumps(entry.data).count(PNG_1X1) == 1, entry.data

    await worker(loopback, db, log, "--gemini")
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    first, second = seen[0]["pid"], seen[-1]["pid"]
    assert [(s["pid"], s["step"], s["files"]) for s in seen] == [(first, 0, []), (second, 1, [["image/png", PNG_1X1]])]
    assert first != second
    assert len(loopback.requests) == 2  # the drawn step was not asked again
    with SQLiteStore(str(db)) as store:
        [answer] = [m for m in store.list_messages("s") if m.role == "assistant"]
    assert [(p["mediaType"], p["url"]) for p in answer.parts if p["type"] == "file"] == [
        ("image/png", f"data:image/png;base64,{PNG_1X1}")]
    assert answer.text.endswith("Done.")
