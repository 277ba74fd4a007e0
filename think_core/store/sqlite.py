"""The embedded SQLite store: standard library ``sqlite3`` only, SQL only.

One connection per store, shared between threads and guarded by a ``threading.RLock``. File
databases run in WAL mode with ``synchronous=NORMAL`` and a busy timeout, so several stores (in
one process or in several) can share one file; the write-ahead log is checkpointed every
:data:`~think_core.store._sqlite_connection.CHECKPOINT_EVERY` commits by the store (on its
thread, when the engine runs it) rather than by SQLite inside whichever call crossed its
size. Every write runs in a ``BEGIN IMMEDIATE`` transaction: the write lock is taken up front,
which makes read-then-write sequences (idempotent accept, claiming the next submission,
retaking expired leases) atomic across connections and avoids SQLite's lock-upgrade deadlock.

Tables (schema version :data:`SCHEMA_VERSION`, kept in ``PRAGMA user_version``): ``sessions``;
``messages`` (``parts``/``metadata`` as JSON, ordered by an internal increasing ``seq``, id
unique per session); ``compactions``; ``submissions``; ``submission_journal``; ``streams`` and ``stream_chunks``; ``state`` (JSON
key/value per session).
"""

from __future__ import annotations

from ._session_rows import SessionRows, SessionSummary
from ._sqlite_connection import SCHEMA_VERSION, SQLiteConnection
from ._stream_rows import StreamRows
from ._submission_rows import SubmissionRows

__all__ = ["SCHEMA_VERSION", "SQLiteStore", "SessionSummary"]


class SQLiteStore(SessionRows, StreamRows, SubmissionRows, SQLiteConnection):
    """The embedded SQLite :class:`~think_core.store.base.Store`. ``path`` is a file path,
    ``":memory:"`` (the default; private to this store) or a ``file:`` URI. Use as a context
    manager or call :meth:`close`."""
