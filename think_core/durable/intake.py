"""The intake of a durable submission's turn (see :mod:`think_core.turn.intake`).

The turn runs only while its submission is still running here; its input comes from the store
(the messages accepted with it, or a continuation's tool answers); its answer is stored with the
submission's completion in one transaction, so a crash never leaves one without the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..turn.intake import HistoryStore, TurnRequestFields
from ..turn.pending_calls import ToolAnswer, apply_answer
from .crash_recovery import REPLACING_KEY

if TYPE_CHECKING:
    from ..store import AsyncStore, Submission
    from ..types import UIMessage

__all__ = ["ANSWERS_KEY", "SubmissionIntake"]

#: A continuation's key in a submission's ``metadata``: the tool answers it applies (a client
#: tool's results, a human's approvals). Its one message is the assistant message it continues,
#: as the client sent it back; that message is never appended (it is stored already).
ANSWERS_KEY = "answers"


class SubmissionIntake:
    """The input and answer of ``row``'s turn. ``recovering``: the row was retaken after its
    owner died, and its messages (if any) were applied by that owner already.

    ``answered`` tells the drain whether the turn stored its answer (and so finished the row, or
    learnt that the row is not its own any more)."""

    def __init__(self, db: AsyncStore, row: Submission, *, recovering: bool) -> None:
        self._db = db
        self.row = row
        self.recovering = recovering
        self.answered = False

    @property
    def answers(self) -> list[ToolAnswer] | None:
        """A continuation's tool answers (``None`` for a submission of messages)."""
        raw = (self.row.metadata or {}).get(ANSWERS_KEY)
        return [ToolAnswer.from_dict(a) for a in raw] if isinstance(raw, list) else None

    async def admit(self, db: HistoryStore, session_id: str, request: TurnRequestFields) -> bool:
        current = await self._db.get_submission(session_id, self.row.submission_id)
        return current is not None and current.status == "running"

    async def write(self, db: HistoryStore, session_id: str, request: TurnRequestFields) -> None:
        answers = self.answers
        if answers is not None:
            # Applied again after a crash: answering a call twice is ignored.
            for answer in answers:
                await apply_answer(self._db, session_id, answer.tool_call_id, answer.settle())
        elif not self.recovering:
            replacing = (self.row.metadata or {}).get(REPLACING_KEY)
            if replacing:
                await self._db.apply_submission_messages(session_id, self.row.submission_id, replacing_from=replacing)
            else:
                await self._db.apply_submission_messages(session_id, self.row.submission_id)

    async def store_answer(
        self, db: HistoryStore, session_id: str, message: UIMessage | None, status: str, error: str | None
    ) -> bool:
        self.answered = True  # stored, or refused because the row is not ours: never finish it elsewhere
        stored: bool = await self._db.store_submission_answer(
            session_id, self.row.submission_id, message, status, error=error
        )
        return stored
