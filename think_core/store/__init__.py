"""Persistence: the :class:`Store` protocol (``base``), the overlay algebra every backend shares
(``overlays``), the embedded SQLite backend (``sqlite``) and the async facade (``aio``)."""

from .aio import AsyncStore, open_store
from .base import (
    COMPACTION_ROLE,
    COMPACTION_SUMMARY_PREFIX,
    TERMINAL_SUBMISSION_STATUSES,
    Compaction,
    JournalEntry,
    Store,
    StreamInfo,
    Submission,
    SubmissionOwner,
    SubmissionStatus,
)
from .sqlite import SCHEMA_VERSION, SQLiteStore

__all__ = [
    "COMPACTION_ROLE",
    "COMPACTION_SUMMARY_PREFIX",
    "SCHEMA_VERSION",
    "TERMINAL_SUBMISSION_STATUSES",
    "AsyncStore",
    "Compaction",
    "JournalEntry",
    "SQLiteStore",
    "Store",
    "StreamInfo",
    "Submission",
    "SubmissionOwner",
    "SubmissionStatus",
    "open_store",
]
