"""What recovery does with a submission another owner left ``running``.

* Its messages were never appended: it goes back to ``pending`` and runs from the start.
* Every one of its messages is already in the session (the owner died between appending them
  and recording that it had): it is marked applied, and handled as below.
* Its messages were applied: it is answered — a turn runs for it without appending the user
  message a second time.

Which ``running`` rows are orphaned is decided here too (:func:`is_orphaned`): the lease the
owner took expired, or the owner was a process on this host that is gone — then there is no
reason to wait for the lease. Backends only offer the primitives (retake a row whose owner is
still the one seen, requeue, mark applied); these decisions are the same for all of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Literal, Protocol

from ..process_identity import ProcessIdentity, process_is_gone, this_process
from ..store import Store, Submission, SubmissionOwner

__all__ = [
    "REPLACING_KEY",
    "HeldRow",
    "RecoveryAction",
    "describe_takeover",
    "is_orphaned",
    "lease_expiry",
    "owner_is_gone",
    "recover_orphaned_submissions",
    "recover_submissions",
    "recovery_action",
    "resume_own_submissions",
]

RecoveryAction = Literal["requeue", "mark_applied_and_answer", "answer"]

logger = logging.getLogger("think.submissions")


class HeldRow(Protocol):
    """What deciding whether a row is orphaned reads: a :class:`~think_core.store.Submission`,
    or an :class:`~think_core.store.UnfinishedSubmission` of a sweep over every session."""

    @property
    def submission_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def owner(self) -> SubmissionOwner | None: ...
    @property
    def heartbeat_at(self) -> float | None: ...
    @property
    def lease_expires_at(self) -> float | None: ...

#: A submission's ``metadata`` key: the stored message it replaces with everything after it (an
#: edit, a regeneration), deleted in the transaction that applies its messages.
REPLACING_KEY = "replacing_from"


def recovery_action(submission: Submission, stored_message_ids: Iterable[str]) -> RecoveryAction:
    """The action for a retaken ``submission``, given the ids of the session's stored messages."""
    if submission.messages_applied:
        return "answer"
    if (submission.metadata or {}).get(REPLACING_KEY):
        return "requeue"  # what it replaces goes with the applying: present or not, apply it again
    stored = set(stored_message_ids)
    if all(m.id in stored for m in submission.messages):
        return "mark_applied_and_answer"
    return "requeue"


def owner_is_gone(owner: SubmissionOwner | None, here: ProcessIdentity | None = None) -> bool:
    """Whether the process that holds a lease certainly died (see :func:`process_is_gone`)."""
    if owner is None or owner.host is None or owner.pid is None:
        return False
    return process_is_gone(ProcessIdentity(owner.host, owner.pid, owner.started, owner.namespace), here)


def lease_expiry(row: HeldRow, default_lease: float) -> float:
    """When a running row's lease expires: the owner's own lease, or ``default_lease`` after
    its last sign of life when it recorded none."""
    if row.lease_expires_at is not None:
        return row.lease_expires_at
    return (row.heartbeat_at or row.started_at or 0.0) + default_lease


def is_orphaned(
    row: HeldRow, me: SubmissionOwner, *, default_lease: float, now: float, here: ProcessIdentity | None = None
) -> bool:
    """Whether a ``running`` row held by another owner may be taken over now."""
    if row.status != "running" or (row.owner is not None and row.owner.id == me.id):
        return False
    return now >= lease_expiry(row, default_lease) or owner_is_gone(row.owner, here)


def recover_orphaned_submissions(store: Store, session_id: str, *, lease: float) -> list[Submission]:
    """Retake the session's orphaned ``running`` submissions (:func:`is_orphaned`; ``lease`` is
    this process's, recorded for the retaken rows and assumed for owners that recorded none),
    requeue the ones never applied, and return the ones that need an answer, in acceptance
    order. Synchronous: run it on the store's thread."""
    me, now, here = store.submission_owner(), time.time(), this_process()
    retaken: list[Submission] = []
    for row in store.list_submissions(session_id, status="running"):
        if not is_orphaned(row, me, default_lease=lease, now=now, here=here):
            continue
        taken = store.retake_submission(
            session_id, row.submission_id, if_owner=row.owner.id if row.owner else None,
            if_heartbeat_at=row.heartbeat_at, lease=lease,
        )
        if taken is not None:
            logger.info("%s", describe_takeover(taken, default_lease=lease, now=now, here=here))
            retaken.append(taken)
    return _decide(store, session_id, retaken)


def resume_own_submissions(store: Store, session_id: str, submission_ids: Iterable[str]) -> list[Submission]:
    """This process's own ``running`` submissions that a store outage interrupted (their turn
    stopped, nothing else took them): requeue the ones never applied, and return the ones that
    need an answer, to run again from their journal. One another owner took meanwhile (its
    lease expired during the outage) is that owner's. Synchronous: run it on the store's thread."""
    me, wanted = store.submission_owner(), set(submission_ids)
    mine = [
        row for row in store.list_submissions(session_id, status="running")
        if row.submission_id in wanted and row.owner is not None and row.owner.id == me.id
    ]
    return _decide(store, session_id, mine)


def describe_takeover(row: HeldRow, *, default_lease: float, now: float, here: ProcessIdentity | None = None) -> str:
    """One line for the log: which submission was taken over, from whom, and how late."""
    owner = row.owner
    who = "an owner that recorded nothing" if owner is None else (
        f"{owner.host or '?'} pid {owner.pid if owner.pid is not None else '?'} (store {owner.id[:8]})"
    )
    last_seen = row.heartbeat_at or row.started_at
    silent = f"{now - last_seen:.1f} s after its last heartbeat" if last_seen is not None else "never heartbeaten"
    late = now - lease_expiry(row, default_lease)
    if late >= 0:
        why = f"its lease expired {late:.1f} s ago"
    else:
        why = f"its process is gone, {-late:.1f} s before its lease would have expired" if owner_is_gone(owner, here) else "orphaned"
    return f"took over submission {row.submission_id} of session {row.session_id} from {who}: {why}, {silent}"


def recover_submissions(store: Store, session_id: str, *, stale_after: float | None = None) -> list[Submission]:
    """Retake the session's ``running`` submissions whose lease expired (all of them when
    ``stale_after`` is ``None``), requeue the ones never applied, and return the ones that need
    an answer, in acceptance order. Synchronous: run it on the store's thread."""
    retaken = store.retake_stale_submissions(session_id, stale_after=stale_after, lease=stale_after)
    return _decide(store, session_id, retaken)


def _decide(store: Store, session_id: str, retaken: list[Submission]) -> list[Submission]:
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
