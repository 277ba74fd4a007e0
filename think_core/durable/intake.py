"""The intake of a durable submission's turn (see :mod:`think_core.turn.intake`).

The turn runs only while its submission is still running here; its input comes from the store
(the messages accepted with it, or a continuation's tool answers); its answer is stored with the
submission's completion in one transaction, so a crash never leaves one without the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..turn.intake import HistoryStore, StoreWrite, TurnRequestFields
from ..turn.pending_calls import ToolAnswer, apply_answer
from .crash_recovery import REPLACING_KEY

if TYPE_CHECKING:
    from ..store import AsyncStore, Store, Submission
    from ..types import UIMessage

__all__ = ["ANSWERS_KEY", "UNFINISHED", "SubmissionIntake"]

#: The statuses of a submission still to run (or running).
UNFINISHED = ("pending", "running")

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
        #: Whether anything of the session was unfinished once the answer was stored (``None``:
        #: not known, the turn stored no answer).
        self.unfinished_after: bool | None = None

    @property
    def answers(self) -> list[ToolAnswer] | None:
        """A continuation's tool answers (``None`` for a submission of messages)."""
        raw = (self.row.metadata or {}).get(ANSWERS_KEY)
        return [ToolAnswer.from_dict(a) for a in raw] if isinstance(raw, list) else None

    async def admit(self, db: HistoryStore, session_id: str, request: TurnRequestFields) -> bool:
        if not self.recovering:
            # Claimed by this drain just now, with a lease: it is ours. A stop that finished it
            # meanwhile in another process is learnt at the turn's first journal entry or its
            # answer (both refused), so the re-read would cost every turn a round trip to save
            # a rare one a model call.
            return True
        current = await self._db.get_submission(session_id, self.row.submission_id)
        return current is not None and current.status == "running"

    async def write(
        self, db: HistoryStore, session_id: str, request: TurnRequestFields, opening: Sequence[StoreWrite] = ()
    ) -> None:
        answers = self.answers
        if answers is not None:
            # Applied again after a crash: answering a call twice is ignored.
            for answer in answers:
                await apply_answer(self._db, session_id, answer.tool_call_id, answer.settle())
        elif not self.recovering:
            submission_id = self.row.submission_id
            replacing = (self.row.metadata or {}).get(REPLACING_KEY) or None


            def apply(store: Store) -> None:
                # With what goes with them (the stream opened) and the history's read, in one.
                for write in opening:
                    write(store)
                store.apply_submission_messages(session_id, submission_id, replacing_from=replacing)

            await self._db.write_turn_input(session_id, apply)

    async def store_answer(
        self, db: HistoryStore, session_id: str, message: UIMessage | None, status: str, error: str | None,
        closing: Sequence[StoreWrite] = (),
    ) -> bool:
        self.answered = True  # stored, or refused because the row is not ours: never finish it elsewhere
        submission_id = self.row.submission_id

        def answer(store: Store) -> bool:
            # One transaction: the answer with the row's completion, what the turn held back for
            # it (its stream's end), and whether the session has anything else to run.
            for write in closing:
                write(store)
            stored = store.store_submission_answer(session_id, submission_id, message, status, error=error)
            self.unfinished_after = bool(store.list_submissions(session_id, status=UNFINISHED, limit=1))
            return stored

        return await self._db.atomic(answer, session_id=session_id, brief=True)
