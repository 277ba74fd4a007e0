"""The persistence seam: the :class:`Store` protocol the engine calls, and its records.

A store keeps, per session: AI-SDK-shaped UI messages in order; compaction overlays (a summary
standing in for a range of messages in the model-facing history, the originals kept); durable
submissions (``pending → running → completed | error | aborted | skipped``, an idempotency
key unique per session, a messages-applied marker, a lease held by one owner — a store
instance — the id of the answer stored with the completion, and the step journal of the turn
while it runs); the UI message chunks of each
streaming turn (so a page that joins late can replay and follow it, after a restart too, from
any process sharing the store); and a small JSON key/value state. Every method is synchronous and short; the engine awaits them through
:class:`~think_core.store.aio.AsyncStore`, off the event loop.

Backends implement exactly these methods. What is the same for every backend (the overlay
algebra, what recovery does with an interrupted submission) lives outside them, in
:mod:`~think_core.store.overlays` and :mod:`think_core.durable.crash_recovery`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ..types import UIMessage

__all__ = [
    "is_postgres_url",
    "COMPACTION_ROLE",
    "COMPACTION_SUMMARY_PREFIX",
    "TERMINAL_SUBMISSION_STATUSES",
    "Compaction",
    "HistoryChanges",
    "HistoryMark",
    "JournalEntry",
    "MessageWindow",
    "Store",
    "StreamInfo",
    "Submission",
    "SubmissionOwner",
    "SubmissionStatus",
    "UnfinishedSubmission",
]

SubmissionStatus = Literal["pending", "running", "completed", "error", "aborted", "skipped"]
TERMINAL_SUBMISSION_STATUSES: tuple[str, ...] = ("completed", "error", "aborted", "skipped")

#: Role of the synthetic message that stands in for a compacted range in ``history()``.
#: ``"user"`` rather than ``"system"``: several providers accept system text only at the top
#: of the prompt, while a user message is valid anywhere in the conversation.
COMPACTION_ROLE: Literal["user"] = "user"
COMPACTION_SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


def is_postgres_url(spec: object) -> bool:
    """Whether ``spec`` names a PostgreSQL database (rather than a SQLite file)."""
    return isinstance(spec, str) and spec.startswith(("postgresql://", "postgres://"))


class SubmissionOwner(BaseModel):
    """Who holds a submission's lease: a store instance (``id``) in a process (``host``,
    ``pid``, ``started``: its start time in Unix seconds, ``namespace``: the kernel boot and PID
    namespace its pid belongs to). A process on the same host and namespace can tell that the
    owner died (see :mod:`think_core.process_identity`); ``None`` fields were not known."""

    id: str
    host: str | None = None
    pid: int | None = None
    started: float | None = None
    namespace: str | None = None


class Submission(BaseModel):
    """A durable submission (``submit_messages``). ``request_id`` equals ``submission_id``.
    While it runs, ``owner`` holds its lease, renewed at ``heartbeat_at`` until
    ``lease_expires_at`` (``None`` when the owner recorded no lease length)."""

    submission_id: str
    session_id: str
    idempotency_key: str | None = None
    request_id: str
    status: SubmissionStatus
    error: str | None = None
    metadata: dict[str, Any] | None = None
    messages: list[UIMessage] = Field(default_factory=list)
    messages_applied: bool = False
    created_at: float
    started_at: float | None = None
    completed_at: float | None = None
    answer_message_id: str | None = None  # the answer stored with the completion, if any
    owner: SubmissionOwner | None = None  # the last owner of its lease
    heartbeat_at: float | None = None
    lease_expires_at: float | None = None  # while running
    #: Entries its step journal has had (0: no turn of it journaled anything, so there is no
    #: journal to read).
    progress: int = 0


class UnfinishedSubmission(BaseModel):
    """A ``pending`` or ``running`` submission as a sweep for orphans sees it (see
    :meth:`Store.unfinished_submissions`): where it is, who holds its lease and until when,
    without its messages."""

    submission_id: str
    session_id: str
    status: SubmissionStatus
    created_at: float
    started_at: float | None = None
    owner: SubmissionOwner | None = None
    heartbeat_at: float | None = None
    lease_expires_at: float | None = None  # while running


class JournalEntry(BaseModel):
    """One entry of a running submission's step journal (see :mod:`think_core.turn.journal`):
    ``kind`` says what happened, ``key`` to what (a step number, a tool-call id), ``data``
    the JSON details. Entries are kept in the order they were written."""

    seq: int
    kind: str
    key: str
    data: dict[str, Any] = Field(default_factory=dict)
    created_at: float


class StreamInfo(BaseModel):
    """A turn's stream of UI message chunks. ``status`` is ``streaming`` while the turn runs,
    then its outcome (``completed``, ``error``, ``aborted``). ``length`` is the number of chunks
    stored (their ``seq`` runs from 0); ``message_ids`` are the ids of the user messages the
    turn answers, ``continuation`` whether it continues the last assistant message."""

    session_id: str
    stream_id: str
    status: str
    continuation: bool = False
    message_ids: list[str] | None = None
    length: int = 0
    created_at: float
    updated_at: float


class Compaction(BaseModel):
    """A stored compaction overlay: ``summary`` replaces messages ``from..to`` (inclusive)."""

    id: int
    session_id: str
    from_message_id: str
    to_message_id: str
    summary: str
    created_at: float


@dataclass(frozen=True)
class MessageWindow:
    """The end of a session's stored history, read in one snapshot (see
    :meth:`Store.message_window`): ``messages`` from a point to the last one, in order, and
    ``waiting``, every assistant message of the session that holds a tool call waiting for the
    client (its result or a human's approval), wherever it is in the history, in order."""

    messages: list[UIMessage]
    waiting: list[UIMessage]
    #: The session's running stream, else its latest, when it was read in the same snapshot
    #: (``stream_read``; a chat request's window is, see ``request_window``).
    stream: StreamInfo | None = None
    stream_read: bool = False


@dataclass(frozen=True)
class HistoryMark:
    """Where a read of a session's :meth:`Store.history` stood: the session's history
    ``revision`` (one more with every write to its messages or compactions) and the ``seq`` of
    the last stored message it had seen (0: none)."""

    revision: int
    last_seq: int


@dataclass(frozen=True)
class HistoryChanges:
    """What :meth:`Store.history_changes` read, in one snapshot. When ``whole``, ``appended``
    is the whole :meth:`Store.history` (compactions applied) and ``updated`` is empty.
    Otherwise only messages were written since the mark: ``appended`` are the messages stored
    after the last one it had seen, in order; ``updated`` those it had seen that were rewritten
    in place since (:meth:`Store.upsert_message`) — one a compaction covers is not in the
    history and stays out of it. ``mark`` is where this read stands (the next call's ``since``)."""

    mark: HistoryMark
    whole: bool
    appended: list[UIMessage]
    updated: list[UIMessage]


@runtime_checkable
class Store(Protocol):
    """What the engine needs from persistence. Every method is synchronous and short."""

    def close(self) -> None: ...

    # sessions and messages
    def ensure_session(self, session_id: str) -> bool:
        """Make the session if it does not exist; ``True`` when this call made it (a session
        just made holds nothing yet: no messages, submissions or state)."""
        ...

    def list_messages(self, session_id: str) -> list[UIMessage]: ...
    def get_message(self, session_id: str, message_id: str) -> UIMessage | None: ...
    def message_window(
        self, session_id: str, message_ids: Iterable[str] = (), *, before: int = 0, last: int = 0
    ) -> MessageWindow: ...
    def append_messages(self, session_id: str, messages: Sequence[UIMessage]) -> list[UIMessage]: ...
    def upsert_message(self, session_id: str, message: UIMessage) -> None: ...
    def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> int: ...
    def clear_messages(self, session_id: str) -> None: ...

    # compactions
    def add_compaction(self, session_id: str, from_message_id: str, to_message_id: str, summary: str) -> int: ...
    def history(self, session_id: str) -> list[UIMessage]: ...
    def history_changes(self, session_id: str, since: HistoryMark | None = None) -> HistoryChanges: ...

    # durable submissions: accept, claim, renew, apply, finish, retake
    def create_submission(
        self,
        session_id: str,
        messages: Sequence[UIMessage],
        *,
        submission_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[Submission, bool]: ...
    def get_submission(self, session_id: str, submission_id: str) -> Submission | None: ...
    def get_submission_by_key(self, session_id: str, idempotency_key: str) -> Submission | None: ...
    def submissions_by_key_prefix(
        self, session_id: str, prefix: str, limit: int | None = None
    ) -> list[Submission]: ...
    def list_submissions(
        self, session_id: str, status: str | Iterable[str] | None = None, limit: int | None = None
    ) -> list[Submission]: ...
    def submission_owner(self) -> SubmissionOwner: ...
    def claim_next_submission(
        self, session_id: str, *, in_order: bool = False, lease: float | None = None
    ) -> Submission | None: ...
    def heartbeat_submission(self, session_id: str, submission_id: str) -> bool: ...
    def store_submission_answer(
        self,
        session_id: str,
        submission_id: str,
        message: UIMessage | None,
        status: str,
        error: str | None = None,
    ) -> bool: ...
    def apply_submission_messages(
        self, session_id: str, submission_id: str, *, replacing_from: str | None = None
    ) -> list[UIMessage]: ...
    def mark_submission_applied(self, session_id: str, submission_id: str) -> bool: ...
    def requeue_submission(self, session_id: str, submission_id: str) -> bool: ...
    def finish_submission(self, session_id: str, submission_id: str, status: str, error: str | None = None) -> bool: ...
    def journal_submission(
        self, session_id: str, submission_id: str, kind: str, key: str, data: dict[str, Any]
    ) -> bool: ...
    def submission_journal(self, session_id: str, submission_id: str) -> list[JournalEntry]: ...
    def retake_stale_submissions(
        self, session_id: str, *, stale_after: float | None = None, lease: float | None = None
    ) -> list[Submission]: ...
    def retake_submission(
        self,
        session_id: str,
        submission_id: str,
        *,
        if_owner: str | None,
        if_heartbeat_at: float | None,
        lease: float | None = None,
    ) -> Submission | None: ...
    def running_submissions(self) -> list[Submission]: ...
    def pending_session_ids(self) -> list[str]: ...
    def unfinished_submissions(self) -> list[UnfinishedSubmission]: ...

    # resumable streams: one row per turn's stream, its chunks in order
    def open_stream(
        self, session_id: str, stream_id: str, *, continuation: bool = False, message_ids: Sequence[str] | None = None
    ) -> StreamInfo: ...
    def append_stream_chunks(self, session_id: str, stream_id: str, first_seq: int, bodies: Sequence[str]) -> None: ...
    def truncate_stream(self, session_id: str, stream_id: str, length: int) -> None: ...
    def finish_stream(self, session_id: str, stream_id: str, status: str) -> bool: ...
    def get_stream(self, session_id: str, stream_id: str | None = None) -> StreamInfo | None: ...
    def stream_chunks(self, session_id: str, stream_id: str, start: int = 0) -> list[str]: ...

    # key/value engine state
    def get_state(self, session_id: str, key: str) -> Any: ...
    def set_state(self, session_id: str, key: str, value: Any) -> None: ...

    # several calls in one transaction: those made inside the block (on this thread) commit
    # together or not at all; ``session_id`` names the session they write; ``read_only``: they
    # only read, from one snapshot
    def atomic(self, session_id: str | None = None, *, read_only: bool = False) -> AbstractContextManager[None]: ...
