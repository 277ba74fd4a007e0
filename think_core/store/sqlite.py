"""The embedded SQLite store: standard library ``sqlite3`` only, SQL only.

One connection per store, shared between threads and guarded by a ``threading.Lock``. File
databases run in WAL mode with ``synchronous=NORMAL`` and a busy timeout, so several stores (in
one process or in several) can share one file. Every write runs in a ``BEGIN IMMEDIATE``
transaction: the write lock is taken up front, which makes read-then-write sequences
(idempotent accept, claiming the next submission, retaking expired leases) atomic across
connections and avoids SQLite's lock-upgrade deadlock.

Tables (schema version :data:`SCHEMA_VERSION`, kept in ``PRAGMA user_version``): ``sessions``;
``messages`` (``parts``/``metadata`` as JSON, ordered by an internal increasing ``seq``, id
unique per session); ``compactions``; ``submissions``; ``state`` (JSON key/value per session).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import UnknownSubmission
from ..types import UIMessage
from .base import TERMINAL_SUBMISSION_STATUSES, Compaction, Submission
from .overlays import apply_overlays, effective_overlays, resolve_anchor

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 1

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

_SUBMISSION_COLUMNS = (
    "submission_id, session_id, idempotency_key, status, error, metadata, messages, "
    "messages_applied_at, created_at, started_at, completed_at"
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _is_memory(path: str) -> bool:
    return path in ("", ":memory:") or (path.startswith("file:") and "mode=memory" in path)


class SQLiteStore:
    """The embedded SQLite :class:`Store`. ``path`` is a file path, ``":memory:"`` (the
    default; private to this store) or a ``file:`` URI. Use as a context manager or call
    :meth:`close`."""

    def __init__(
        self, path: str | os.PathLike[str] = ":memory:", *, busy_timeout: float = 30.0
    ) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._closed = False
        self._conn = sqlite3.connect(
            self.path,
            timeout=busy_timeout,
            isolation_level=None,  # autocommit; transactions are explicit (BEGIN IMMEDIATE)
            check_same_thread=False,
            uri=self.path.startswith("file:"),
        )
        try:
            self._conn.row_factory = sqlite3.Row
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            self._conn.execute("PRAGMA foreign_keys = ON")
            if not _is_memory(self.path):
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")
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
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("store is closed")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: the write lock is taken at BEGIN (waits up to busy_timeout)."""
        with self._lock:
            self._check_open()
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction (one consistent snapshot for several statements)."""
        with self._lock:
            self._check_open()
            conn = self._conn
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    @staticmethod
    def _ensure(conn: sqlite3.Connection, session_id: str) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO sessions (session_id, created_at) VALUES (?, ?)",
            (session_id, time.time()),
        )

    @staticmethod
    def _message(row: sqlite3.Row) -> UIMessage:
        metadata = row["metadata"]
        # Rows were validated on the way in: skip validation on the way out (every turn reads
        # the whole history, so this is the store's hottest path).
        return UIMessage.model_construct(
            id=row["message_id"],
            role=row["role"],
            parts=json.loads(row["parts"]),
            metadata=json.loads(metadata) if metadata is not None else None,
        )

    @staticmethod
    def _submission(row: sqlite3.Row) -> Submission:
        metadata = row["metadata"]
        return Submission(
            submission_id=row["submission_id"],
            session_id=row["session_id"],
            idempotency_key=row["idempotency_key"],
            request_id=row["submission_id"],
            status=row["status"],
            error=row["error"],
            metadata=json.loads(metadata) if metadata is not None else None,
            messages=[UIMessage.model_validate(m) for m in json.loads(row["messages"])],
            messages_applied=row["messages_applied_at"] is not None,
            created_at=row["created_at"],
            started_at=row["started_at"],
            completed_at=row["completed_at"],
        )

    def close(self) -> None:
        """Close the connection. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self) -> "SQLiteStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @property
    def in_memory(self) -> bool:
        """No file, so no other process can hold a lock on it."""
        return _is_memory(self.path)

    # ------------------------------------------------------------------ sessions

    def ensure_session(self, session_id: str) -> None:
        with self._write() as conn:
            self._ensure(conn, session_id)

    def list_sessions(self) -> list[str]:
        """Every known session id, in creation order."""
        with self._read() as conn:
            rows = conn.execute("SELECT session_id FROM sessions ORDER BY rowid").fetchall()
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ messages

    def list_messages(self, session_id: str) -> list[UIMessage]:
        """Every stored message of the session, in order (compactions not applied)."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT message_id, role, parts, metadata FROM messages "
                "WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [self._message(r) for r in rows]

    def get_message(self, session_id: str, message_id: str) -> UIMessage | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT message_id, role, parts, metadata FROM messages "
                "WHERE session_id = ? AND message_id = ?",
                (session_id, message_id),
            ).fetchone()
        return self._message(row) if row is not None else None

    @staticmethod
    def _insert_messages(
        conn: sqlite3.Connection, session_id: str, messages: Sequence[UIMessage]
    ) -> list[UIMessage]:
        appended: list[UIMessage] = []
        now = time.time()
        for message in messages:
            cursor = conn.execute(
                "INSERT INTO messages "
                "(session_id, message_id, role, parts, metadata, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (session_id, message_id) DO NOTHING",
                (
                    session_id,
                    message.id,
                    message.role,
                    _dumps(message.parts),
                    _dumps(message.metadata) if message.metadata is not None else None,
                    now,
                    now,
                ),
            )
            if cursor.rowcount:
                appended.append(message)
        return appended

    def append_messages(self, session_id: str, messages: Sequence[UIMessage]) -> list[UIMessage]:
        """Append at the end, idempotent by id: a message whose id is already stored in the
        session (or repeated within ``messages``) is skipped. Returns the ones appended."""
        messages = list(messages)
        with self._write() as conn:
            self._ensure(conn, session_id)
            return self._insert_messages(conn, session_id, messages)

    def upsert_message(self, session_id: str, message: UIMessage) -> None:
        """Insert at the end, or replace the stored message with this id in place (its
        position is kept)."""
        now = time.time()
        with self._write() as conn:
            self._ensure(conn, session_id)
            conn.execute(
                "INSERT INTO messages "
                "(session_id, message_id, role, parts, metadata, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (session_id, message_id) DO UPDATE SET "
                "role = excluded.role, parts = excluded.parts, metadata = excluded.metadata, "
                "updated_at = excluded.updated_at",
                (
                    session_id,
                    message.id,
                    message.role,
                    _dumps(message.parts),
                    _dumps(message.metadata) if message.metadata is not None else None,
                    now,
                    now,
                ),
            )

    def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> int:
        """Delete messages by id; compactions anchored on a deleted message are dropped too.
        Returns the number of messages deleted."""
        ids = list(dict.fromkeys(message_ids))
        if not ids:
            return 0
        deleted = 0
        with self._write() as conn:
            for message_id in ids:
                deleted += conn.execute(
                    "DELETE FROM messages WHERE session_id = ? AND message_id = ?",
                    (session_id, message_id),
                ).rowcount
                conn.execute(
                    "DELETE FROM compactions WHERE session_id = ? "
                    "AND (from_message_id = ? OR to_message_id = ?)",
                    (session_id, message_id, message_id),
                )
        return deleted

    def clear_messages(self, session_id: str) -> None:
        """Delete every message and every compaction of the session."""
        with self._write() as conn:
            conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM compactions WHERE session_id = ?", (session_id,))

    # ------------------------------------------------------------------ compactions

    def add_compaction(
        self, session_id: str, from_message_id: str, to_message_id: str, summary: str
    ) -> int:
        """Store an overlay replacing messages ``from..to`` (inclusive, by position) with
        ``summary`` in :meth:`history`. Returns its id. ``from``/``to`` may also name a
        synthetic ``compaction_<n>`` message seen in :meth:`history`; it stands for that
        overlay's first / last message. Raises ``ValueError`` for unknown ids or a reversed
        range."""
        with self._write() as conn:
            ids = self._message_ids(conn, session_id)
            overlays = effective_overlays(ids, self._compactions(conn, session_id))
            try:
                from_id = resolve_anchor(from_message_id, ids, overlays, start=True)
                to_id = resolve_anchor(to_message_id, ids, overlays, start=False)
            except ValueError as exc:
                raise ValueError(f"{exc} in session {session_id!r}") from None
            positions = {mid: i for i, mid in enumerate(ids)}
            for mid in (from_id, to_id):
                if mid not in positions:
                    raise ValueError(f"unknown message id {mid!r} in session {session_id!r}")
            if positions[from_id] > positions[to_id]:
                raise ValueError(f"compaction range is reversed: {from_id!r} comes after {to_id!r}")
            cursor = conn.execute(
                "INSERT INTO compactions "
                "(session_id, from_message_id, to_message_id, summary, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (session_id, from_id, to_id, summary, time.time()),
            )
            return int(cursor.lastrowid or 0)

    @staticmethod
    def _message_ids(conn: sqlite3.Connection, session_id: str) -> list[str]:
        return [
            r[0]
            for r in conn.execute("SELECT message_id FROM messages WHERE session_id = ? ORDER BY seq", (session_id,))
        ]

    @staticmethod
    def _compactions(conn: sqlite3.Connection, session_id: str) -> list[Compaction]:
        rows = conn.execute("SELECT * FROM compactions WHERE session_id = ? ORDER BY id", (session_id,))
        return [Compaction(**dict(r)) for r in rows]

    def list_compactions(self, session_id: str) -> list[Compaction]:
        """Stored compaction rows, oldest first (superseded ones included)."""
        with self._read() as conn:
            return self._compactions(conn, session_id)

    def history(self, session_id: str) -> list[UIMessage]:
        """The messages with each effective compaction overlay applied: the range is replaced
        by one synthetic ``compaction_<id>`` message (role ``COMPACTION_ROLE``). The
        originals stay in :meth:`list_messages`."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT message_id, role, parts, metadata FROM messages "
                "WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
            compactions = self._compactions(conn, session_id)
        messages = [self._message(r) for r in rows]
        return apply_overlays(messages, effective_overlays([m.id for m in messages], compactions))

    # ------------------------------------------------------------------ submissions

    def _select_submission(
        self, conn: sqlite3.Connection, session_id: str, where: str, args: tuple[Any, ...]
    ) -> sqlite3.Row | None:
        return conn.execute(
            f"SELECT {_SUBMISSION_COLUMNS} FROM submissions WHERE session_id = ? AND {where}",
            (session_id, *args),
        ).fetchone()

    def create_submission(
        self,
        session_id: str,
        messages: Sequence[UIMessage],
        *,
        submission_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[Submission, bool]:
        """Accept a durable submission (status ``pending``). Returns ``(submission,
        created)``. If a row already exists for ``submission_id`` or ``idempotency_key`` it is
        returned unchanged with ``created=False``; if they name different rows →
        ``ValueError``. Atomic across connections and processes."""
        messages = list(messages)
        if not messages:
            raise ValueError("submission needs at least one message")
        payload = _dumps([m.model_dump(mode="json") for m in messages])
        with self._write() as conn:
            by_id = (
                self._select_submission(conn, session_id, "submission_id = ?", (submission_id,))
                if submission_id is not None
                else None
            )
            by_key = (
                self._select_submission(
                    conn, session_id, "idempotency_key = ?", (idempotency_key,)
                )
                if idempotency_key is not None
                else None
            )
            if by_id is not None and by_key is not None:
                if by_id["submission_id"] != by_key["submission_id"]:
                    raise ValueError(
                        "submission_id and idempotency_key refer to different submissions"
                    )
            existing = by_id if by_id is not None else by_key
            if existing is not None:
                return self._submission(existing), False
            self._ensure(conn, session_id)
            new_id = submission_id if submission_id is not None else uuid.uuid4().hex
            conn.execute(
                "INSERT INTO submissions (session_id, submission_id, idempotency_key, status, "
                "metadata, messages, created_at) VALUES (?, ?, ?, 'pending', ?, ?, ?)",
                (
                    session_id,
                    new_id,
                    idempotency_key,
                    _dumps(metadata) if metadata is not None else None,
                    payload,
                    time.time(),
                ),
            )
            row = self._select_submission(conn, session_id, "submission_id = ?", (new_id,))
            assert row is not None
            return self._submission(row), True

    def get_submission(self, session_id: str, submission_id: str) -> Submission | None:
        with self._read() as conn:
            row = self._select_submission(conn, session_id, "submission_id = ?", (submission_id,))
        return self._submission(row) if row is not None else None

    def list_submissions(
        self,
        session_id: str,
        status: str | Iterable[str] | None = None,
        limit: int | None = None,
    ) -> list[Submission]:
        """Submissions of the session in FIFO (accept) order, optionally filtered by one
        status or several."""
        sql = f"SELECT {_SUBMISSION_COLUMNS} FROM submissions WHERE session_id = ?"
        args: list[Any] = [session_id]
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            sql += f" AND status IN ({', '.join('?' * len(statuses))})"
            args.extend(statuses)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._read() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [self._submission(r) for r in rows]

    def claim_next_submission(self, session_id: str) -> Submission | None:
        """Atomically move the oldest ``pending`` submission to ``running`` (setting
        ``started_at``) and return it; ``None`` when nothing is pending. Each pending row is
        claimed by exactly one caller, across connections and processes."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT submission_id FROM submissions WHERE session_id = ? "
                "AND status = 'pending' ORDER BY seq LIMIT 1",
                (session_id,),
            ).fetchone()
            if row is None:
                return None
            now = time.time()
            conn.execute(
                "UPDATE submissions SET status = 'running', started_at = ?, heartbeat_at = ? "
                "WHERE session_id = ? AND submission_id = ? AND status = 'pending'",
                (now, now, session_id, row[0]),
            )
            claimed = self._select_submission(conn, session_id, "submission_id = ?", (row[0],))
        return self._submission(claimed) if claimed is not None else None

    def heartbeat_submission(self, session_id: str, submission_id: str) -> bool:
        """Renew the lease of a ``running`` submission: recovery in another process leaves a
        row alone while its heartbeat is fresh. Returns whether the row is still running."""
        with self._write() as conn:
            return bool(
                conn.execute(
                    "UPDATE submissions SET heartbeat_at = ? "
                    "WHERE session_id = ? AND submission_id = ? AND status = 'running'",
                    (time.time(), session_id, submission_id),
                ).rowcount
            )

    def mark_submission_applied(self, session_id: str, submission_id: str) -> bool:
        """Record that the submission's messages were appended to the session. Returns
        ``False`` if the row does not exist or was already marked."""
        with self._write() as conn:
            return bool(
                conn.execute(
                    "UPDATE submissions SET messages_applied_at = ? WHERE session_id = ? "
                    "AND submission_id = ? AND messages_applied_at IS NULL",
                    (time.time(), session_id, submission_id),
                ).rowcount
            )

    def apply_submission_messages(self, session_id: str, submission_id: str) -> list[UIMessage]:
        """Append the submission's messages to the session (idempotent by id) and mark it
        applied, in one transaction. Returns the messages actually appended. Raises
        ``KeyError`` for an unknown submission."""
        with self._write() as conn:
            row = self._select_submission(conn, session_id, "submission_id = ?", (submission_id,))
            if row is None:
                raise UnknownSubmission(submission_id, session_id)
            sub = self._submission(row)
            if sub.messages_applied:
                return []
            self._ensure(conn, session_id)
            appended = self._insert_messages(conn, session_id, sub.messages)
            conn.execute(
                "UPDATE submissions SET messages_applied_at = ? "
                "WHERE session_id = ? AND submission_id = ?",
                (time.time(), session_id, submission_id),
            )
            return appended

    def finish_submission(
        self, session_id: str, submission_id: str, status: str, error: str | None = None
    ) -> bool:
        """Set a terminal ``status`` (completed, error, aborted, skipped) and ``completed_at``.
        Only a ``pending`` or ``running`` row changes; returns whether one did."""
        if status not in TERMINAL_SUBMISSION_STATUSES:
            raise ValueError(
                f"finish status must be one of {TERMINAL_SUBMISSION_STATUSES}, not {status!r}"
            )
        with self._write() as conn:
            return bool(
                conn.execute(
                    "UPDATE submissions SET status = ?, error = ?, completed_at = ? "
                    "WHERE session_id = ? AND submission_id = ? "
                    "AND status IN ('pending', 'running')",
                    (status, error, time.time(), session_id, submission_id),
                ).rowcount
            )

    def retake_stale_submissions(
        self, session_id: str, *, stale_after: float | None = None
    ) -> list[Submission]:
        """Take over ``running`` rows whose lease expired (last heartbeat, or start, at least
        ``stale_after`` seconds ago; every running row when ``None``): their lease is renewed
        for the caller in the same transaction, so two processes never retake the same row.
        Returns them in acceptance order; what to do with each is the caller's decision."""
        now = time.time()
        with self._write() as conn:
            rows = conn.execute(
                f"SELECT {_SUBMISSION_COLUMNS}, heartbeat_at FROM submissions WHERE session_id = ? "
                "AND status = 'running' ORDER BY seq",
                (session_id,),
            ).fetchall()
            taken = []
            for row in rows:
                last_seen = row["heartbeat_at"] or row["started_at"] or 0
                if stale_after is not None and last_seen > now - stale_after:
                    continue
                conn.execute(
                    "UPDATE submissions SET heartbeat_at = ? WHERE session_id = ? AND submission_id = ?",
                    (now, session_id, row["submission_id"]),
                )
                taken.append(self._submission(row))
        return taken

    def requeue_submission(self, session_id: str, submission_id: str) -> bool:
        """Put a ``running`` row whose messages were never applied back to ``pending`` (it runs
        again from the start). Returns whether a row changed."""
        with self._write() as conn:
            return bool(
                conn.execute(
                    "UPDATE submissions SET status = 'pending', started_at = NULL "
                    "WHERE session_id = ? AND submission_id = ? AND status = 'running' "
                    "AND messages_applied_at IS NULL",
                    (session_id, submission_id),
                ).rowcount
            )

    def pending_session_ids(self) -> list[str]:
        """Sessions with ``pending`` or ``running`` submissions."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT session_id FROM submissions WHERE status IN ('pending', 'running') "
                "GROUP BY session_id ORDER BY MIN(seq)"
            ).fetchall()
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ state

    def get_state(self, session_id: str, key: str) -> Any:
        """The JSON value stored under ``key``, or ``None``."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT value FROM state WHERE session_id = ? AND key = ?", (session_id, key)
            ).fetchone()
        return json.loads(row[0]) if row is not None else None

    def set_state(self, session_id: str, key: str, value: Any) -> None:
        """Store a JSON-serialisable value; ``None`` deletes the key."""
        with self._write() as conn:
            if value is None:
                conn.execute(
                    "DELETE FROM state WHERE session_id = ? AND key = ?", (session_id, key)
                )
                return
            self._ensure(conn, session_id)
            conn.execute(
                "INSERT INTO state (session_id, key, value, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, "
                "updated_at = excluded.updated_at",
                (session_id, key, _dumps(value), time.time()),
            )


