"""The step journal of a durable turn: what a submission's turn has done, stored as it happens,
so a turn interrupted by a crash resumes after its last durable step.

Each entry is written in the transaction that advances the submission's progress marker and
renews its lease (``Store.journal_submission``), and only while the submission is ours:

* ``streamed`` (key: the step number) — a step's model output, before its tool calls run: the
  step (text, reasoning, tool calls, usage) and the answer's parts so far;
* ``tool_started`` / ``tool_finished`` (key: the tool-call id) — a call about to run / its result;
* ``step`` (key: the step number) — a finished step with its tool results, and the parts so far;
* ``reset`` — what came before is void (the turn runs again from its start, after a reactive
  compaction).

On recovery the turn replays its finished steps without running anything. For the step that
was interrupted after its model output was stored, stored results are reused; a call that
started without a stored result runs again only if its tool is idempotent or read-only, and is
otherwise reported to the model as interrupted. A step whose output was not stored is asked of
the model again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import SubmissionLost
from .types import StepResult, UIMessage

if TYPE_CHECKING:
    from .store import AsyncStore, JournalEntry

__all__ = ["INTERRUPTED_CALL", "JournalReplay", "TurnJournal"]

INTERRUPTED_CALL = (
    "The tool call was interrupted (the process running it stopped) before its result was recorded; "
    "it may or may not have taken effect. It was not run again."
)

# What a step record keeps of a StepResult (the rest is the turn's: session, request id, body).
_STEP_FIELDS = {
    "step_number", "finish_reason", "text", "reasoning_text", "reasoning_blocks", "tool_calls", "tool_results", "usage",
    "model_id", "response_id", "warnings", "provider_metadata", "request", "response",
}


@dataclass
class JournalReplay:
    """What the journal says the interrupted turn had done."""

    message_id: str | None = None  # the answer's id and its parts at the latest snapshot
    parts: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)  # finished steps, in order
    streamed: dict[int, dict[str, Any]] = field(default_factory=dict)  # model output by step
    started: set[str] = field(default_factory=set)  # tool calls that started
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # their results, by call id

    @classmethod
    def of(cls, entries: list[JournalEntry]) -> JournalReplay:
        replay = cls()
        for entry in entries:
            data = entry.data
            if entry.kind == "reset":
                replay = cls()
            elif entry.kind == "tool_started":
                replay.started.add(entry.key)
            elif entry.kind == "tool_finished":
                replay.results[entry.key] = data
            elif entry.kind == "streamed":
                replay._snapshot(data)
                replay.streamed[int(entry.key)] = data["step"]
            elif entry.kind == "step":
                replay._snapshot(data)
                replay.steps.append(data["step"])
        return replay

    def _snapshot(self, data: dict[str, Any]) -> None:
        self.message_id, self.parts = data["message_id"], data["parts"]


class TurnJournal:
    """Writes and reads the journal of one submission's turn."""

    def __init__(self, db: AsyncStore, session_id: str, submission_id: str) -> None:
        self.db = db
        self.session_id = session_id
        self.submission_id = submission_id
        self.replay = JournalReplay()

    async def load(self) -> JournalReplay:
        """Read what an earlier owner of the submission journaled (nothing for a new one)."""
        entries = await self.db.submission_journal(self.session_id, self.submission_id)
        self.replay = JournalReplay.of(entries)
        return self.replay

    async def _write(self, kind: str, key: str, data: dict[str, Any]) -> None:
        if not await self.db.journal_submission(self.session_id, self.submission_id, kind, key, data):
            raise SubmissionLost(self.submission_id, self.session_id)

    async def step_streamed(self, step: StepResult, message: UIMessage) -> None:
        await self._write("streamed", str(step.step_number), _snapshot(step, message))

    async def tool_started(self, call_id: str) -> None:
        await self._write("tool_started", call_id, {})

    async def tool_finished(self, call_id: str, output: Any, error: str | None) -> None:
        await self._write("tool_finished", call_id, {"output": output, "error": error})

    async def step_finished(self, step: StepResult, message: UIMessage) -> None:
        await self._write("step", str(step.step_number), _snapshot(step, message))

    async def reset(self) -> None:
        self.replay = JournalReplay()
        await self._write("reset", "", {})


def _snapshot(step: StepResult, message: UIMessage) -> dict[str, Any]:
    return {
        "step": step.model_dump(mode="json", include=_STEP_FIELDS),
        "message_id": message.id,
        "parts": message.parts,
    }
