"""What the SQL of every backend stands on: the connection a backend provides (transactions),
this store as a submission owner, and the message rows shared by several tables' code.

The row classes (``_session_rows``, ``_submission_rows``, ``_journal_rows``, ``_stream_rows``)
are written once, in SQL that SQLite and PostgreSQL both run, with ``?`` placeholders (the
PostgreSQL connection translates them). Where the two differ a backend sets a class attribute:
:attr:`RowsBase.IS` (null-safe equality), :attr:`RowsBase.INSERTION_ORDER` (the column that
orders rows by insertion), :attr:`RowsBase.LOCK_NEXT` (how a claim locks the row it reads) and
:attr:`RowsBase.KEY_ORDER` (how a key is compared in code-point order) and
:attr:`RowsBase.DML_IN_WITH` (whether dependent writes can be one statement).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from ..messages import PENDING_TOOL_STATES, is_tool_part
from ..process_identity import this_process
from ..types import UIMessage
from .base import SubmissionOwner

__all__ = ["HISTORY_REVISIONS", "INSERT_MESSAGE", "RowsBase", "dumps", "is_waiting", "message_row"]


#: (``json.dumps`` with options builds an encoder per call; ``encode`` keeps no state between calls.)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)


INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, message_id, role, parts, metadata, waiting, rev, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
)

#: The migration (the same SQL on both backends) that adds the history revisions: the session's
#: ``history_rev`` goes up by one with every write to its messages or compactions, each message
#: row keeps the ``rev`` it was last written at, and ``history_reset`` is the last revision that
#: removed or covered messages (a delete, a clear, a compaction). Rows written before it are at 0.
HISTORY_REVISIONS = (
    "ALTER TABLE sessions ADD COLUMN history_rev BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE sessions ADD COLUMN history_reset BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE messages ADD COLUMN rev BIGINT NOT NULL DEFAULT 0",
    "CREATE INDEX messages_by_rev ON messages (session_id, rev)",
)


def is_waiting(message: UIMessage) -> bool:
    """Whether ``message`` is an assistant message holding a tool call that waits for the client
    (its result, or a human's approval): such messages are kept findable without reading the
    whole history (the ``waiting`` column, see :meth:`Store.message_window`)."""
    return message.role == "assistant" and any(
        is_tool_part(p) and p.get("state") in PENDING_TOOL_STATES for p in message.parts
    )


def message_row(session_id: str, message: UIMessage, now: float, rev: int) -> tuple[Any, ...]:
    """The values of :data:`INSERT_MESSAGE` for ``message``, written at history revision ``rev``."""
    metadata = dumps(message.metadata) if message.metadata is not None else None
    waiting = 1 if is_waiting(message) else 0
    return (session_id, message.id, message.role, dumps(message.parts), metadata, waiting, rev, now, now)


class RowsBase:
    """A backend's connection, as the row classes use it. A backend implements ``_write`` (a
    transaction that serialises with other writers of the rows it touches) and ``_read`` (one
    consistent snapshot); the connection they yield has ``execute(sql, args)`` returning a
    cursor whose rows are indexable by position and by column name, and ``executemany``."""

    #: Null-safe equality (``owner IS ?``): SQLite's ``IS``, standard SQL's ``IS NOT DISTINCT FROM``.
    IS = "IS"
    #: The column that orders a table's rows by insertion when nothing else does.
    INSERTION_ORDER = "rowid"
    #: Appended to the query that reads the next submission to claim (row locks, where there are any).
    LOCK_NEXT = ""
    #: Put after a key column to compare it in code-point order (SQLite's default BINARY order).
    KEY_ORDER = ""
    #: Whether a ``WITH`` clause may hold an ``UPDATE … RETURNING`` (PostgreSQL): two dependent
    #: writes in one statement, one round trip to a database server instead of two.
    DML_IN_WITH = False

    owner_id: str
    owner: SubmissionOwner

    def _init_owner(self, host: str | None) -> None:
        """This store as the owner of the submissions it claims or retakes: a name of its own,
        and the process it lives in."""
        self.owner_id = uuid.uuid4().hex
        process = this_process(host)
        self.owner = SubmissionOwner(
            id=self.owner_id, host=process.host, pid=process.pid, started=process.started, namespace=process.namespace
        )

    def _write(self, session_id: str | None = None) -> AbstractContextManager[Any]:
        """A write transaction; ``session_id`` names the session whose rows it changes (a
        backend may serialise writes per session rather than per database). Inside
        :meth:`atomic` (on the same thread) it is the atomic transaction."""
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    # -- several store calls as one transaction ---------------------------------------------
    _atomic_local: threading.local

    def _atomic_state(self) -> threading.local:
        local: threading.local | None = self.__dict__.get("_atomic_local")
        if local is None:  # made on first use (setdefault: threads racing here get the same one)
            local = self.__dict__.setdefault("_atomic_local", threading.local())
        return local

    def _joined(self) -> Any:
        """The connection of the :meth:`atomic` transaction open on this thread, if any."""
        return getattr(self._atomic_state(), "conn", None)

    @contextmanager
    def atomic(self, session_id: str | None = None, *, read_only: bool = False) -> Iterator[None]:
        """The store calls made inside (on this thread) run in one write transaction: they
        commit together when the block ends, or none does (an exception rolls all of them
        back). ``session_id`` names the session the calls write (PostgreSQL takes its write
        lock at the start). ``read_only``: the calls only read, from one snapshot. Nested
        blocks join the outer one.

        Think: a durable turn's writes that belong together — a step's journal entries, the
        answer with its completion and the end of its stream — are one round trip."""
        state = self._atomic_state()
        if getattr(state, "conn", None) is not None:
            self._join_session(state.conn, session_id)
            yield
            return
        with self._read() if read_only else self._write(session_id) as conn:
            state.conn, state.sessions = conn, {session_id}
            try:
                yield
            finally:
                state.conn = None

    def _join_session(self, conn: Any, session_id: str | None) -> None:
        """A call inside :meth:`atomic` writes ``session_id``: a backend that locks per session
        takes that session's lock now, once per transaction."""

    @staticmethod
    def _ensure(conn: Any, session_id: str) -> bool:
        """The session's row, made if missing; ``True`` when this made it."""
        made: int = conn.execute(
            "INSERT INTO sessions (session_id, created_at) VALUES (?, ?) ON CONFLICT (session_id) DO NOTHING",
            (session_id, time.time()),
        ).rowcount
        return made == 1

    @staticmethod
    def _next_revision(conn: Any, session_id: str, *, reset: bool = False) -> int:
        """Raise the session's history revision by one and return it (see ``HISTORY_REVISIONS``);
        ``reset``: this write removes or covers messages, so a history cached before it is read
        again whole. Called before the rows are written: the session's row lock it takes orders
        the writers of one session, so a later revision never holds an earlier ``seq``."""
        also = ", history_reset = history_rev + 1" if reset else ""
        row = conn.execute(
            f"UPDATE sessions SET history_rev = history_rev + 1{also} WHERE session_id = ? RETURNING history_rev",
            (session_id,),
        ).fetchone()
        return int(row[0]) if row is not None else 0

    @staticmethod
    def _ensure_next_revision(conn: Any, session_id: str) -> int:
        """:meth:`_ensure` and :meth:`_next_revision` in one statement (a new session's first
        write is its revision 1), for the writes that append or replace messages."""
        row = conn.execute(
            "INSERT INTO sessions (session_id, created_at, history_rev) VALUES (?, ?, 1) ON CONFLICT (session_id) "
            "DO UPDATE SET history_rev = sessions.history_rev + 1 RETURNING history_rev",
            (session_id, time.time()),
        ).fetchone()
        return int(row[0])

    @staticmethod
    def _message(row: Any) -> UIMessage:
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
    def _insert_messages(
        conn: Any, session_id: str, messages: Sequence[UIMessage], rev: int | None = None
    ) -> list[UIMessage]:
        """Insert at the end, skipping ids the session already holds; returns the inserted
        ones. Shared by appending and by applying a submission, each in its own transaction.
        ``rev``: the revision the caller already took for these rows."""
        appended: list[UIMessage] = []
        now = time.time()
        if rev is None:
            rev = RowsBase._next_revision(conn, session_id) if messages else 0
        for message in messages:
            cursor = conn.execute(
                INSERT_MESSAGE + "ON CONFLICT (session_id, message_id) DO NOTHING",
                message_row(session_id, message, now, rev),
            )
            if cursor.rowcount:
                appended.append(message)
        return appended

    @staticmethod
    def _delete_messages(conn: Any, session_id: str, message_ids: Sequence[str]) -> int:
        """Delete messages by id with the compactions anchored on them; returns how many went."""
        deleted = overlays = 0
        for message_id in message_ids:
            deleted += conn.execute(
                "DELETE FROM messages WHERE session_id = ? AND message_id = ?",
                (session_id, message_id),
            ).rowcount
            overlays += conn.execute(
                "DELETE FROM compactions WHERE session_id = ? AND (from_message_id = ? OR to_message_id = ?)",
                (session_id, message_id, message_id),
            ).rowcount
        if deleted or overlays:  # (nothing to order here: a reset has every reader read it whole)
            RowsBase._next_revision(conn, session_id, reset=True)
        return deleted

    def _upsert_message(self, conn: Any, session_id: str, message: UIMessage, now: float) -> None:
        """Insert at the end, or replace the stored message with this id in place."""
        rev = self._ensure_next_revision(conn, session_id)
        conn.execute(
            INSERT_MESSAGE + "ON CONFLICT (session_id, message_id) DO UPDATE SET "
            "role = excluded.role, parts = excluded.parts, metadata = excluded.metadata, "
            "waiting = excluded.waiting, rev = excluded.rev, updated_at = excluded.updated_at",
            message_row(session_id, message, now, rev),
        )

