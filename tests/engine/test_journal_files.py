"""A durable turn's journal keeps a generated image's bytes once per entry: the step record names
the answer's ``file`` part that holds them, and a resumed turn reads them back from it; a file no
part holds (a ``transform_stream`` dropped its chunk) keeps its bytes in the step. Against a
real SQLite store and a claimed submission."""

from __future__ import annotations

import json
from binascii import a2b_base64
from pathlib import Path
from typing import Any

from tests.support.cited import PNG_1X1
from think_core import GeneratedFile
from think_core.store import AsyncStore, SQLiteStore
from think_core.turn.journal import TurnJournal
from think_core.types import StepResult, ToolCallRequest, UIMessage

DRAWN = GeneratedFile("image/png", base64=PNG_1X1, provider_metadata={"google": {"thoughtSignature": "c2ln"}})
LINKED = GeneratedFile("image/png", url="https://files.example/drawn.png")
PART = {"type": "file", "mediaType": "image/png", "url": f"data:image/png;base64,{PNG_1X1}"}


async def journaled(tmp_path: Path, files: list[GeneratedFile], parts: list[dict[str, Any]]) -> tuple[str, TurnJournal]:
    """A step with ``files`` and an answer of ``parts``, journaled as finished; the entry as
    stored (JSON) and the journal a new owner of the submission loads."""
    db = AsyncStore(SQLiteStore(str(tmp_path / "journal.db")))
    await db.create_submission("s", [UIMessage(id="u1", role="user", parts=[{"type": "text", "text": "draw"}])])
    claimed = await db.claim_next_submission("s")
    assert claimed is not None
    journal = TurnJournal(db, "s", claimed.submission_id)
    # A step with a tool call: journaled when it finishes (the answer's own step is held for
    # the answer's transaction).
    call = ToolCallRequest(id="c1", name="lookup", input={})
    step = StepResult(session=None, request_id="r1", step_number=0, text="Here.", files=files, tool_calls=[call])
    answer = UIMessage(id="a1", role="assistant", parts=[{"type": "text", "text": "Here."}, *parts])
    await journal.step_finished(step, lambda: answer)
    [entry] = await db.submission_journal("s", claimed.submission_id)
    resumed = TurnJournal(db, "s", claimed.submission_id)
    await resumed.load()
    db.sync.close()
    return json.dumps(entry.data), resumed


async def test_an_image_in_the_answer_is_journaled_once_and_read_back_into_the_step(tmp_path: Path) -> None:
    stored, resumed = await journaled(tmp_path, [DRAWN, LINKED], [PART, {"type": "file", "mediaType": "image/png", "url": LINKED.url}])
    assert stored.count(PNG_1X1) == 1
    [step] = resumed.replay.steps
    restored = StepResult(session=None, request_id="r1", **step).files
    assert restored == [DRAWN, LINKED]
    assert restored[0].data == a2b_base64(PNG_1X1)
    assert resumed.replay.parts[1] == PART


async def test_a_file_no_part_holds_keeps_its_bytes_in_the_step(tmp_path: Path) -> None:
    stored, resumed = await journaled(tmp_path, [DRAWN], [])
    assert stored.count(PNG_1X1) == 1
    [step] = resumed.replay.steps
    assert StepResult(session=None, request_id="r1", **step).files == [DRAWN]
