"""SQLite plumbing: the schema and its version, the one shared connection, and transactions
(``_write`` takes the write lock at ``BEGIN IMMEDIATE``; ``_read`` reads one snapshot); and a
call run where it was made when it need not wait (:meth:`SQLiteConnection.run_without_waiting`)."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from ..messages import PENDING_TOOL_STATES
from ._rows import HISTORY_REVISIONS, RowsBase
from .threads import GroupBroken

SCHEMA_VERSION = 7

T = TypeVar("T")

#: The result codes of a lock another connection holds (SQLITE_BUSY and its extended codes):
#: with no busy timeout, what a call that would have to wait fails with, before it wrote anything.
_BUSY = frozenset({5, 261, 517, 773})  # BUSY, BUSY_RECOVERY, BUSY_SNAPSHOT, BUSY_TIMEOUT

#: Commits between two checkpoints of a file database's write-ahead log. SQLite's own (after
#: the commit that takes the log past 1,000 pages) runs in the committing call and syncs the
#: file; it is turned off so that a call run on the event loop never waits for a disk sync, and
#: the store runs one on its thread this often instead (see ``checkpoint_due``).
CHECKPOINT_EVERY = 200

# Version 1, the baseline every database starts from; later versions are migrations over it.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    message_id TEXT NOT NULL,
    role TEXT NOT NULL,
    parts TEXT NOT NULL,
    metadata TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (session_id, message_id)
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages (session_id, seq);
CREATE TABLE IF NOT EXISTS compactions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    from_message_id TEXT NOT NULL,
    to_message_id TEXT NOT NULL,
    summary TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS compactions_by_session ON compactions (session_id, id);
CREATE TABLE IF NOT EXISTS submissions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    submission_id TEXT NOT NULL,
    idempotency_key TEXT,
    status TEXT NOT NULL CHECK (status IN
        ('pending', 'running', 'completed', 'error', 'aborted', 'skipped')),
    error TEXT,
    metadata TEXT,
    messages TEXT NOT NULL,
    messages_applied_at REAL,
    created_at REAL NOT NULL,
    started_at REAL,
    completed_at REAL,
    heartbeat_at REAL,
    UNIQUE (session_id, submission_id),
    UNIQUE (session_id, idempotency_key)
);
CREATE INDEX IF NOT EXISTS submissions_by_status ON submissions (session_id, status, seq);
CREATE TABLE IF NOT EXISTS state (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (session_id, key)
);
"""
# The statements that take a database from the previous version to this one.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # Lease owners (a store instance is one owner) and the answer stored with the completion.
    2: (
        "ALTER TABLE submissions ADD COLUMN owner TEXT",
        "ALTER TABLE submissions ADD COLUMN answer_message_id TEXT",
    ),
    # The step journal of a running submission's turn, and its progress marker.
    3: (
        "ALTER TABLE submissions ADD COLUMN progress INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE submission_journal (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
            submission_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            data TEXT NOT NULL,
            created_at REAL NOT NULL
        )""",
        "CREATE INDEX journal_by_submission ON submission_journal (session_id, submission_id, seq)",
    ),
    # Who the owner is (so a dead one on this host is recovered at once) and the lease it took;
    # the unfinished rows of every session, for the recovery watcher and start-up recovery.
    4: (
        "ALTER TABLE submissions ADD COLUMN owner_host TEXT",
        "ALTER TABLE submissions ADD COLUMN owner_pid INTEGER",
        "ALTER TABLE submissions ADD COLUMN owner_started REAL",
        "ALTER TABLE submissions ADD COLUMN owner_namespace TEXT",
        "ALTER TABLE submissions ADD COLUMN lease REAL",
        "CREATE INDEX submissions_unfinished ON submissions (status, session_id) "
        "WHERE status IN ('pending', 'running')",
    ),
    # Resumable streams: each turn's UI message chunks, so a late joiner can replay and follow it.
    5: (
        """CREATE TABLE streams (
            session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
            stream_id TEXT NOT NULL,
            status TEXT NOT NULL,
            continuation INTEGER NOT NULL DEFAULT 0,
            message_ids TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (session_id, stream_id)
        )""",
        """CREATE TABLE stream_chunks (
            session_id TEXT NOT NULL,
            stream_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, stream_id, seq)
        )""",
    ),
    # The assistant messages holding a tool call that waits for the client, marked and indexed:
    # a chat request checks the answers it brings against them without reading the whole history.
    6: (
        "ALTER TABLE messages ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0",
        "UPDATE messages SET waiting = 1 WHERE role = 'assistant' AND EXISTS ("
        " SELECT 1 FROM json_each(messages.parts) AS part WHERE json_type(part.value) = 'object'"
        " AND (substr(json_extract(part.value, '$.type'), 1, 5) = 'tool-'"
        " OR json_extract(part.value, '$.type') = 'dynamic-tool')"
        f" AND json_extract(part.value, '$.state') IN ({', '.join(map(repr, sorted(PENDING_TOOL_STATES)))}))",
        "CREATE INDEX messages_waiting ON messages (session_id, seq) WHERE waiting = 1",
    ),
    # Each session's history revision, and the revision each message row was last written at:
    # what changed since a cached history is read by index (Store.history_changes).
    7: HISTORY_REVISIONS,
}


def _is_memory(path: str) -> bool:
    return path in ("", ":memory:") or (path.startswith("file:") and "mode=memory" in path)


class SQLiteConnection(RowsBase):
    """The connection a SQLite store runs on. ``path`` is a file path, ``":memory:"`` or a
    ``file:`` URI. ``host`` is the host name recorded as the owner of the submissions this
    store runs (default: this machine's name); give each machine a distinct one."""

    def __init__(
        self, path: str | os.PathLike[str] = ":memory:", *, busy_timeout: float = 30.0, host: str | None = None
    ) -> None:
        self.path = os.fspath(path)
        self._init_owner(host)
        # Re-entrant: run_without_waiting holds it around a call whose transactions take it again.
        self._lock = threading.RLock()
        self._closed = False
        self._busy_timeout_ms = int(busy_timeout * 1000)
        #: Write transactions committed on this connection, and how many had been when the
        #: write-ahead log was last checkpointed.
        self._commits = self._checkpointed_at = 0
        #: Whether a call runs through run_without_waiting (on the event loop) now.
        self._without_waiting = False
        # A file database has a write-ahead log to checkpoint (decided once: commits ask).
        self._wal = not _is_memory(self.path)
        self._conn = sqlite3.connect(
            self.path,
            timeout=busy_timeout,
            isolation_level=None,  # autocommit; transactions are explicit (BEGIN IMMEDIATE)
            check_same_thread=False,
            uri=self.path.startswith("file:"),
        )
        try:
            self._conn.row_factory = sqlite3.Row
            self._conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            self._conn.execute("PRAGMA foreign_keys = ON")
            if self._wal:
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")
                self._conn.execute("PRAGMA wal_autocheckpoint = 0")  # see CHECKPOINT_EVERY
            self._migrate()
        except BaseException:
            self._conn.close()
            self._closed = True
            raise

    # ------------------------------------------------------------------ plumbing

    def _migrate(self) -> None:
        with self._write() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"store schema version {version} is newer than this code supports "
                    f"({SCHEMA_VERSION})"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            for step in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[step]:
                    conn.execute(statement)
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("store is closed")

    @contextmanager
    def _write(self, session_id: str | None = None) -> Iterator[sqlite3.Connection]:
        """A write transaction: the database's write lock is taken at BEGIN (waits up to busy_timeout)."""
        joined = self._joined()
        if joined is not None:  # inside atomic(): its transaction holds the write lock already
            yield joined
            return
        with self._lock:
            self._check_open()
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # (an I/O error may have rolled it back already)
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._commits += 1
            if self.checkpoint_due and not self._without_waiting:
                self.checkpoint()  # (on a thread that may wait: here, as SQLite's own would)

    # -- a call where it was made, when it need not wait -------------------------------------

    def run_without_waiting(self, call: Callable[[], T]) -> tuple[bool, T | None]:
        """``call()`` — store calls of one transaction — on this thread, if it needs no wait:
        ``(True, its result)``; ``(False, None)``, having written nothing, when it would wait
        for the connection (another thread is using it) or for a lock another connection holds
        on the file. The engine runs a file store's calls on the event loop this way, and the
        ones that would wait on the store's thread: a hop to the thread and back costs more
        than most calls.

        Only for a call of one transaction (every store method, an ``atomic`` block): a lock
        taken later than its first statement could not be given up without undoing a commit."""
        if not self._lock.acquire(blocking=False):
            return False, None
        try:
            self._check_open()
            conn = self._conn
            committed = self._commits
            conn.execute("PRAGMA busy_timeout = 0")
            self._without_waiting = True
            try:
                return True, call()
            except sqlite3.OperationalError as exc:
                busy = getattr(exc, "sqlite_errorcode", None) in _BUSY
                if busy and self._commits == committed and not conn.in_transaction:
                    return False, None  # (its transaction was rolled back: nothing was written)
                raise
            finally:
                self._without_waiting = False
                conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        finally:
            self._lock.release()

    @property
    def checkpoint_due(self) -> bool:
        """Whether the write-ahead log should be checkpointed now (a file database): the
        caller of :meth:`run_without_waiting` runs :meth:`checkpoint` on a thread then."""
        return self._wal and self._commits - self._checkpointed_at >= CHECKPOINT_EVERY

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the database file, as far as no reader needs it (a
        passive checkpoint: it waits for nobody). Syncs the file: run on the store's thread."""
        with self._lock:
            if self._closed or self._conn.in_transaction:  # (a group's: the next call does it)
                return
            self._checkpointed_at = self._commits
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    # -- several queued calls as one transaction (StoreThreads' CallGroups) ----------------------

    def together(self) -> AbstractContextManager[None]:
        """One write transaction around the calls of a group (see ``StoreThreads``)."""
        return self.atomic()

    @contextmanager
    def alone(self) -> Iterator[None]:
        """One call of a group in a savepoint of its own: when it raises, only its writes are
        undone. :class:`GroupBroken` when the group's transaction is gone."""
        conn = self._joined()
        if conn is None or not conn.in_transaction:
            raise GroupBroken("the group's transaction is gone")
        conn.execute("SAVEPOINT think_call")
        try:
            yield
        except BaseException as exc:
            if not conn.in_transaction:
                raise GroupBroken("the group's transaction is gone") from exc
            conn.execute("ROLLBACK TO think_call")
            conn.execute("RELEASE think_call")
            raise
        if not conn.in_transaction:
            raise GroupBroken("the group's transaction is gone")
        conn.execute("RELEASE think_call")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction (one consistent snapshot for several statements)."""
        joined = self._joined()
        if joined is not None:
            yield joined
            return
        with self._lock:
            self._check_open()
            conn = self._conn
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def close(self) -> None:
        """Close the connection. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    @property
    def location(self) -> str:
        """Where the rows are, for messages to the user."""
        return self.path

    @property
    def in_memory(self) -> bool:
        """No file, so no other process can hold a lock on it."""
        return _is_memory(self.path)

