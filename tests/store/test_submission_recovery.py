"""The recovery decision, apart from any backend."""

from __future__ import annotations

from think_core.durable.crash_recovery import recover_submissions, recovery_action
from think_core.store import Submission
from think_core.types import UIMessage


def row(*message_ids: str, applied: bool = False) -> Submission:
    return Submission(
        submission_id="s1",
        session_id="x",
        request_id="s1",
        status="running",
        messages=[UIMessage(id=m, role="user", parts=[{"type": "text", "text": m}]) for m in message_ids],
        messages_applied=applied,
        created_at=0.0,
    )


def test_applied_rows_are_answered() -> None:
    assert recovery_action(row("u1", applied=True), []) == "answer"


def test_rows_whose_messages_are_all_stored_are_marked_and_answered() -> None:
    assert recovery_action(row("u1", "u2"), ["x", "u2", "u1"]) == "mark_applied_and_answer"


def test_rows_with_a_message_missing_run_again() -> None:
    assert recovery_action(row("u1", "u2"), ["u1"]) == "requeue"
    assert recovery_action(row("u1"), []) == "requeue"


class RecordingStore:
    """The four protocol methods recovery uses, over fixed rows; records every call."""

    def __init__(self, retaken: list[Submission], stored_ids: list[str]) -> None:
        self.retaken, self.stored_ids = retaken, stored_ids
        self.calls: list[tuple[str, object]] = []

    def retake_stale_submissions(
        self, session_id: str, *, stale_after: float | None = None, lease: float | None = None
    ) -> list[Submission]:
        assert lease == stale_after  # the retaken rows are held for the lease their staleness was judged by
        self.calls.append(("retake", stale_after))
        return self.retaken

    def list_messages(self, session_id: str) -> list[UIMessage]:
        self.calls.append(("list_messages", session_id))
        return [UIMessage(id=m, role="user", parts=[]) for m in self.stored_ids]

    def requeue_submission(self, session_id: str, submission_id: str) -> bool:
        self.calls.append(("requeue", submission_id))
        return True

    def mark_submission_applied(self, session_id: str, submission_id: str) -> bool:
        self.calls.append(("mark_applied", submission_id))
        return True


def with_id(submission_id: str, submission: Submission) -> Submission:
    return submission.model_copy(update={"submission_id": submission_id, "request_id": submission_id})


def test_nothing_retaken_reads_no_history() -> None:
    store = RecordingStore([], ["u1"])
    assert recover_submissions(store, "x", stale_after=30.0) == []  # type: ignore[arg-type]
    assert store.calls == [("retake", 30.0)]


def test_recovery_requeues_marks_and_returns_the_rows_to_answer_in_order() -> None:
    rows = [with_id("applied", row("u1", applied=True)), with_id("lost", row("u2", "u3")),
            with_id("unmarked", row("u4")), with_id("partly", row("u4", "u5"))]
    store = RecordingStore(rows, ["u1", "u2", "u4"])
    answer = recover_submissions(store, "x")  # type: ignore[arg-type]
    assert [(r.submission_id, r.messages_applied) for r in answer] == [("applied", True), ("unmarked", True)]
    assert store.calls == [
        ("retake", None), ("list_messages", "x"), ("requeue", "lost"), ("mark_applied", "unmarked"), ("requeue", "partly")
    ]
    assert not rows[2].messages_applied  # the retaken row itself is left as the store returned it
