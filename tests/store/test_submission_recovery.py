"""The recovery decision, apart from any backend."""

from __future__ import annotations

from think_core.store import Submission
from think_core.submission_recovery import recovery_action
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
