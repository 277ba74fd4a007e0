"""Persistence: the :class:`Store` protocol (``base``), the overlay algebra every backend shares
(``overlays``), the embedded SQLite backend (``sqlite``), the PostgreSQL backend (``postgres``,
imported on first use: it needs the ``postgres`` extra) and the async facade (``aio``)."""

from typing import TYPE_CHECKING, Any

from .aio import AsyncStore, open_store
from .base import (
    COMPACTION_ROLE,
    COMPACTION_SUMMARY_PREFIX,
    TERMINAL_SUBMISSION_STATUSES,
    Compaction,
    HistoryChanges,
    HistoryMark,
    JournalEntry,
    MessageWindow,
    Store,
    StreamInfo,
    Submission,
    SubmissionOwner,
    SubmissionStatus,
    UnfinishedSubmission,
)
from .sqlite import SCHEMA_VERSION, SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "COMPACTION_ROLE",
    "COMPACTION_SUMMARY_PREFIX",
    "SCHEMA_VERSION",
    "TERMINAL_SUBMISSION_STATUSES",
    "AsyncStore",
    "Compaction",
    "HistoryChanges",
    "HistoryMark",
    "JournalEntry",
    "MessageWindow",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "StreamInfo",
    "Submission",
    "SubmissionOwner",
    "SubmissionStatus",
    "UnfinishedSubmission",
    "open_store",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":  # psycopg only when asked for
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
