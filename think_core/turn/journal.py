"""The step journal of a durable turn: what a submission's turn has done, stored as it happens,
so a turn interrupted by a crash resumes after its last durable step.

Each entry is written in the transaction that advances the submission's progress marker and
renews its lease (``Store.journal_submission``), and only while the submission is ours; a
step's entries are written together (see :class:`TurnJournal`):

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

Every turn has a :class:`Journal` and calls it unconditionally: a :class:`NullJournal` for the
turns of ``chat()``, ``stream()`` and the other in-process entry paths (it records nothing and
restores nothing), the store-backed :class:`TurnJournal` for a durable submission's turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import SubmissionLost
from ..types import StepResult, UIMessage
from .ui_replay import replay_chunks

if TYPE_CHECKING:
    from ..store import AsyncStore, JournalEntry, Store

__all__ = ["INTERRUPTED_CALL", "Journal", "JournalReplay", "MessageSnapshot", "NullJournal", "TurnJournal"]

INTERRUPTED_CALL = (
    "The tool call was interrupted (the process running it stopped) before its result was recorded; "
    "it may or may not have taken effect. It was not run again."
)

# What a step record keeps of a StepResult (the rest is the turn's: session, request id, body).
_STEP_FIELDS = {
    "step_number", "finish_reason", "text", "reasoning_text", "reasoning_blocks", "tool_calls", "tool_results", "usage",
    "model_id", "response_id", "warnings", "provider_metadata", "request", "response", "sources", "files",
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
                replay.streamed[int(entry.key)] = _with_files(data["step"], data["parts"])
            elif entry.kind == "step":
                replay._snapshot(data)
                replay.steps.append(_with_files(data["step"], data["parts"]))
        return replay

    def _snapshot(self, data: dict[str, Any]) -> None:
        self.message_id, self.parts = data["message_id"], data["parts"]


#: The answer as it stands, built only by a journal that records it (a snapshot costs a copy of
#: every part: a turn that records nothing never pays for it).
MessageSnapshot = Callable[[], UIMessage]


class Journal(Protocol):
    """What a turn records as it goes, and what an interrupted run of it had recorded.

    The turn calls every method unconditionally; each may raise
    :class:`~think_core.errors.SubmissionLost` when the turn is no longer its submission's.
    """

    #: What an earlier run recorded (empty until :meth:`load`, and for a new turn).
    replay: JournalReplay

    async def load(self) -> JournalReplay:
        """Read what an earlier run of this turn recorded."""
        ...

    def stream_start(self, message: MessageSnapshot) -> list[dict[str, Any]] | None:
        """The chunks a resumable stream of the turn starts with (what was restored), or ``None``
        when it starts with nothing but the turn's own ``start``."""
        ...

    async def step_streamed(self, step: StepResult, message: MessageSnapshot) -> None:
        """A step's model output, before its tool calls run."""
        ...

    async def tool_started(self, call_id: str) -> None:
        """A tool call is about to run."""
        ...

    async def tool_finished(self, call_id: str, output: Any, error: str | None) -> None:
        """A tool call's result (or error)."""
        ...

    async def step_finished(self, step: StepResult, message: MessageSnapshot) -> None:
        """A finished step, with its tool results."""
        ...

    async def reset(self) -> None:
        """What was recorded is void: the turn runs again from its start."""
        ...


class NullJournal:
    """The journal of a turn that is not durable: records nothing, restores nothing."""

    def __init__(self) -> None:
        self.replay = JournalReplay()

    async def load(self) -> JournalReplay:
        return self.replay

    def stream_start(self, message: MessageSnapshot) -> list[dict[str, Any]] | None:
        return None

    async def step_streamed(self, step: StepResult, message: MessageSnapshot) -> None:
        pass

    async def tool_started(self, call_id: str) -> None:
        pass

    async def tool_finished(self, call_id: str, output: Any, error: str | None) -> None:
        pass

    async def step_finished(self, step: StepResult, message: MessageSnapshot) -> None:
        pass

    async def reset(self) -> None:
        pass


def _write_entries(store: Store, session_id: str, submission_id: str, entries: list[tuple[str, str, dict[str, Any]]]) -> bool:
    # Stops at the first refusal (the row is not ours): nothing after it is written either.
    return all(store.journal_submission(session_id, submission_id, kind, key, data) for kind, key, data in entries)


class TurnJournal:
    """The journal of one durable submission's turn, in the store.

    A step's entries are batched: its model output (``streamed``) is held back and written with
    the next entry that must be durable before something happens — a tool call about to run
    (its side effect must never be repeated unknowingly), a tool's result (it cannot be had
    again), the finished step (before ``on_step_finish``) — in one transaction. The answer's
    step (one without tool calls) is held too: the answer's transaction follows, completes
    the row and drops its journal. A crash loses at most what was held: a step whose model
    output was not stored yet is asked of the model again. ``entries`` is the row's journal length as claimed (its
    ``progress``): 0 means there is nothing to read."""

    def __init__(self, db: AsyncStore, session_id: str, submission_id: str, *, entries: int | None = None) -> None:
        self.db = db
        self.session_id = session_id
        self.submission_id = submission_id
        self.replay = JournalReplay()
        self._entries = entries
        self._held: list[tuple[str, str, dict[str, Any]]] = []

    async def load(self) -> JournalReplay:
        """Read what an earlier owner of the submission journaled (nothing for a new one)."""
        if self._entries == 0:  # the claim said no turn of it journaled anything
            return self.replay
        entries = await self.db.submission_journal(self.session_id, self.submission_id)
        self.replay = JournalReplay.of(entries)
        return self.replay

    def stream_start(self, message: MessageSnapshot) -> list[dict[str, Any]] | None:
        # After a crash the stream is written again from what was restored (not its `finish`):
        # a page that follows it sees the whole answer, whatever the crash cut off.
        chunks = replay_chunks(message())[:-1]
        # Nothing restored (a first run): not even `start`. The turn's own comes once the answer
        # shows something (the builder holds it back), so a turn that fails before any output
        # streams its error alone here too, and a page resuming it is announced no message that
        # is never stored (issue 33). The empty list still clears what an earlier run wrote.
        return chunks if len(chunks) > 1 else []

    async def _write(self, kind: str, key: str, data: dict[str, Any]) -> None:
        """Write this entry now, with the ones held back before it, in one transaction."""
        entries, self._held = [*self._held, (kind, key, data)], []
        session_id, submission_id = self.session_id, self.submission_id
        if len(entries) == 1:
            written = await self.db.journal_submission(session_id, submission_id, kind, key, data)
        else:
            written = await self.db.atomic(
                lambda store: _write_entries(store, session_id, submission_id, entries), session_id=session_id,
                brief=True,
            )
        if not written:
            raise SubmissionLost(submission_id, session_id)

    async def step_streamed(self, step: StepResult, message: MessageSnapshot) -> None:
        self._held.append(("streamed", str(step.step_number), _snapshot(step, message())))

    async def tool_started(self, call_id: str) -> None:
        await self._write("tool_started", call_id, {})

    async def tool_finished(self, call_id: str, output: Any, error: str | None) -> None:
        await self._write("tool_finished", call_id, {"output": output, "error": error})

    async def step_finished(self, step: StepResult, message: MessageSnapshot) -> None:
        entry = ("step", str(step.step_number), _snapshot(step, message()))
        if step.tool_calls:  # durable before on_step_finish: a crash after it never repeats the step
            await self._write(*entry)
        else:  # the answer's step: the answer's transaction follows (and drops the journal)
            self._held.append(entry)

    async def reset(self) -> None:
        self.replay = JournalReplay()
        self._held = []  # void as well
        await self._write("reset", "", {})


def _snapshot(step: StepResult, message: UIMessage) -> dict[str, Any]:
    return {
        "step": _by_reference(step.model_dump(mode="json", include=_STEP_FIELDS), message.parts),
        "message_id": message.id,
        "parts": message.parts,
    }


# A generated file's bytes are in the entry twice otherwise — the step's ``files`` and the
# answer's ``file`` part (a data URL) — and an image is megabytes. The step keeps the index of
# the part holding them instead (``base64_part``); a file no part holds (a plugin's
# transform_stream dropped its chunk) keeps its bytes.
def _by_reference(step: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    files = step.get("files")
    if not files:
        return step
    step["files"] = [_file_reference(file, parts) for file in files]
    return step


def _file_reference(file: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    if file.get("base64") is None:
        return file  # a url: nothing big to share
    url = f"data:{file['media_type']};base64,{file['base64']}"
    for index in range(len(parts) - 1, -1, -1):  # the step's files are among the latest parts
        part = parts[index]
        if part.get("type") == "file" and part.get("url") == url:
            return {**{k: v for k, v in file.items() if k != "base64"}, "base64_part": index}
    return file


def _with_files(step: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A journaled step whose files' bytes are read back from the parts they were stored in."""
    files = step.get("files")
    if not files:
        return step
    restored = []
    for file in files:
        if "base64_part" in file:
            file = dict(file)
            file["base64"] = str(parts[file.pop("base64_part")]["url"]).partition(",")[2]
        restored.append(file)
    return {**step, "files": restored}
