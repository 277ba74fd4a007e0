"""What the SQL of every backend stands on: the connection a backend provides (transactions),
this store as a submission owner, and the message rows shared by several tables' code.

The row classes (``_session_rows``, ``_submission_rows``, ``_journal_rows``, ``_stream_rows``)
are written once, in SQL that SQLite and PostgreSQL both run, with ``?`` placeholders (the
PostgreSQL connection translates them). Where the two differ a backend sets a class attribute:
:attr:`RowsBase.IS` (null-safe equality), :attr:`RowsBase.INSERTION_ORDER` (the column that
orders rows by insertion), :attr:`RowsBase.LOCK_NEXT` (how a claim locks the row it reads) and
:attr:`RowsBase.KEY_ORDER` (how a key is compared in code-point order).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..messages import PENDING_TOOL_STATES, is_tool_part
from ..process_identity import this_process
from ..types import UIMessage
from .base import SubmissionOwner

__all__ = ["INSERT_MESSAGE", "RowsBase", "dumps", "is_waiting", "message_row"]


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, message_id, role, parts, metadata, waiting, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
)


def is_waiting(message: UIMessage) -> bool:
    """Whether ``message`` is an assistant message holding a tool call that waits for the client
    (its result, or a human's approval): such messages are kept findable without reading the
    whole history (the ``waiting`` column, see :meth:`Store.message_window`)."""
    return message.role == "assistant" and any(
        is_tool_part(p) and p.get("state") in PENDING_TOOL_STATES for p in message.parts
    )


def message_row(session_id: str, message: UIMessage, now: float) -> tuple[Any, ...]:
    """The values of :data:`INSERT_MESSAGE` for ``message``."""
    metadata = dumps(message.metadata) if message.metadata is not None else None
    waiting = 1 if is_waiting(message) else 0
    return (session_id, message.id, message.role, dumps(message.parts), metadata, waiting, now, now)


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
        backend may serialise writes per session rather than per database)."""
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    @staticmethod
    def _ensure(conn: Any, session_id: str) -> None:
        conn.execute(
            "INSERT INTO sessions (session_id, created_at) VALUES (?, ?) ON CONFLICT (session_id) DO NOTHING",
            (session_id, time.time()),
        )

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
    def _insert_messages(conn: Any, session_id: str, messages: Sequence[UIMessage]) -> list[UIMessage]:
        """Insert at the end, skipping ids the session already holds; returns the inserted
        ones. Shared by appending and by applying a submission, each in its own transaction."""
        appended: list[UIMessage] = []
        now = time.time()
        for message in messages:
            cursor = conn.execute(
                INSERT_MESSAGE + "ON CONFLICT (session_id, message_id) DO NOTHING",
                message_row(session_id, message, now),
            )
            if cursor.rowcount:
                appended.append(message)
        return appended

    @staticmethod
    def _delete_messages(conn: Any, session_id: str, message_ids: Sequence[str]) -> int:
        """Delete messages by id with the compactions anchored on them; returns how many went."""
        deleted = 0
        for message_id in message_ids:
            deleted += conn.execute(
                "DELETE FROM messages WHERE session_id = ? AND message_id = ?",
                (session_id, message_id),
            ).rowcount
            conn.execute(
                "DELETE FROM compactions WHERE session_id = ? AND (from_message_id = ? OR to_message_id = ?)",
                (session_id, message_id, message_id),
            )
        return deleted

    def _upsert_message(self, conn: Any, session_id: str, message: UIMessage, now: float) -> None:
        """Insert at the end, or replace the stored message with this id in place."""
        self._ensure(conn, session_id)
        conn.execute(
            INSERT_MESSAGE + "ON CONFLICT (session_id, message_id) DO UPDATE SET "
            "role = excluded.role, parts = excluded.parts, metadata = excluded.metadata, "
            "waiting = excluded.waiting, updated_at = excluded.updated_at",
            message_row(session_id, message, now),
        )

