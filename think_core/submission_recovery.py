"""What recovery does with a submission another owner left ``running``.

* Its messages were never appended: it goes back to ``pending`` and runs from the start.
* Every one of its messages is already in the session (the owner died between appending them
  and recording that it had): it is marked applied, and handled as below.
* Its messages were applied: it is answered — a turn runs for it without appending the user
  message a second time.

Backends only offer the primitives (retake an expired lease, requeue, mark applied); this
decision is the same for all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from .store import Store, Submission

__all__ = ["RecoveryAction", "recover_submissions", "recovery_action"]

RecoveryAction = Literal["requeue", "mark_applied_and_answer", "answer"]


def recovery_action(submission: Submission, stored_message_ids: Iterable[str]) -> RecoveryAction:
    """The action for a retaken ``submission``, given the ids of the session's stored messages."""
    if submission.messages_applied:
        return "answer"
    stored = set(stored_message_ids)
    if all(m.id in stored for m in submission.messages):
        return "mark_applied_and_answer"
    return "requeue"


def recover_submissions(store: Store, session_id: str, *, stale_after: float | None = None) -> list[Submission]:
    """Retake the session's ``running`` submissions whose lease expired (all of them when
    ``stale_after`` is ``None``), requeue the ones never applied, and return the ones that need
    an answer, in acceptance order. Synchronous: run it on the store's thread."""
    retaken = store.retake_stale_submissions(session_id, stale_after=stale_after)
    if not retaken:
        return []
    stored = [m.id for m in store.list_messages(session_id)]
    answer: list[Submission] = []
    for row in retaken:
        action = recovery_action(row, stored)
        if action == "requeue":
            store.requeue_submission(session_id, row.submission_id)
            continue
        if action == "mark_applied_and_answer":
            store.mark_submission_applied(session_id, row.submission_id)
            row = row.model_copy(update={"messages_applied": True})
        answer.append(row)
    return answer
