"""Sessions, messages, compaction overlays and key/value state, for every backend."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ..types import UIMessage
from ._rows import RowsBase, dumps

#: How many ids one ``IN (...)`` look-up names (well under every backend's limit on parameters).
_IDS_PER_QUERY = 500
from .base import Compaction, HistoryChanges, HistoryMark, MessageWindow
from .overlays import apply_overlays, effective_overlays, resolve_anchor


class SessionSummary(NamedTuple):
    """One row of :meth:`SessionRows.session_summaries` (times are Unix seconds)."""

    session_id: str
    created_at: float
    updated_at: float
    messages: int


class SessionRows(RowsBase):
    """A session's messages, compactions and state, on the backend's connection."""

    def ensure_session(self, session_id: str) -> bool:
        with self._write(session_id) as conn:
            return self._ensure(conn, session_id)

    # ------------------------------------------------------------------ sessions

    def list_sessions(self) -> list[str]:
        """Every known session id, in creation order."""
        with self._read() as conn:
            rows = conn.execute(f"SELECT session_id FROM sessions ORDER BY {self.INSERTION_ORDER}").fetchall()
        return [r[0] for r in rows]

    def session_summaries(self) -> list[SessionSummary]:
        """Every session with its message count and last activity, most recently active first."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT s.session_id, s.created_at, COUNT(m.seq), MAX(m.updated_at) "
                "FROM sessions s LEFT JOIN messages m ON m.session_id = s.session_id "
                f"GROUP BY s.session_id ORDER BY COALESCE(MAX(m.updated_at), s.created_at) DESC, s.{self.INSERTION_ORDER} DESC"
            ).fetchall()
        return [SessionSummary(r[0], r[1], r[3] if r[3] is not None else r[1], r[2]) for r in rows]

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

    def message_window(
        self, session_id: str, message_ids: Iterable[str] = (), *, before: int = 0, last: int = 0
    ) -> MessageWindow:
        """The end of the stored history (compactions not applied) with the messages waiting for
        the client, in one snapshot. ``messages`` runs to the last message from the earliest
        stored one of ``message_ids`` (less ``before`` messages before it), and holds at least
        the last ``last`` messages (all of them when fewer are stored); empty when neither
        reaches a message. Indexed look-ups only: the cost follows the window and the ids, not
        the length of the history."""
        ids = list(dict.fromkeys(message_ids))
        with self._read() as conn:
            start = self._window_start(conn, session_id, ids, before, last)
            rows = [] if start is None else conn.execute(
                "SELECT message_id, role, parts, metadata FROM messages "
                "WHERE session_id = ? AND seq >= ? ORDER BY seq",
                (session_id, start),
            ).fetchall()
            waiting = conn.execute(
                "SELECT message_id, role, parts, metadata FROM messages "
                "WHERE session_id = ? AND waiting = 1 ORDER BY seq",
                (session_id,),
            ).fetchall()
        return MessageWindow([self._message(r) for r in rows], [self._message(r) for r in waiting])

    @staticmethod
    def _window_start(conn: Any, session_id: str, ids: list[str], before: int, last: int) -> int | None:
        """The ``seq`` a :meth:`message_window` starts at (``None``: it is empty)."""
        starts: list[int] = []
        named: int | None = None
        for i in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[i : i + _IDS_PER_QUERY]
            row = conn.execute(
                f"SELECT MIN(seq) FROM messages WHERE session_id = ? AND message_id IN ({', '.join('?' * len(chunk))})",
                (session_id, *chunk),
            ).fetchone()
            if row[0] is not None:
                named = row[0] if named is None else min(named, row[0])
        if named is not None:
            starts.append(named)
            if before > 0:
                starts.append(SessionRows._nth_before(conn, session_id, named, before))
        if last > 0:
            starts.append(SessionRows._nth_before(conn, session_id, None, last - 1))
        return min(starts) if starts else None

    @staticmethod
    def _nth_before(conn: Any, session_id: str, seq: int | None, n: int) -> int:
        """The ``seq`` of the ``n``-th message before ``seq`` (``None``: counting from the last
        message, which is the 0th), or -1 when there are fewer: the window starts at the first."""
        if seq is None:
            row = conn.execute(
                "SELECT seq FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?", (session_id, n)
            ).fetchone()
        else:
            row = conn.execute(
                "SELECT seq FROM messages WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1 OFFSET ?",
                (session_id, seq, n - 1),
            ).fetchone()
        return int(row[0]) if row is not None else -1

    def append_messages(self, session_id: str, messages: Sequence[UIMessage]) -> list[UIMessage]:
        """Append at the end, idempotent by id: a message whose id is already stored in the
        session (or repeated within ``messages``) is skipped. Returns the ones appended."""
        messages = list(messages)
        with self._write(session_id) as conn:
            if not messages:
                self._ensure(conn, session_id)
                return []
            return self._insert_messages(conn, session_id, messages, self._ensure_next_revision(conn, session_id))

    def upsert_message(self, session_id: str, message: UIMessage) -> None:
        """Insert at the end, or replace the stored message with this id in place (its
        position is kept)."""
        with self._write(session_id) as conn:
            self._upsert_message(conn, session_id, message, time.time())

    def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> int:
        """Delete messages by id; compactions anchored on a deleted message are dropped too.
        Returns the number of messages deleted."""
        ids = list(dict.fromkeys(message_ids))
        if not ids:
            return 0
        with self._write(session_id) as conn:
            return self._delete_messages(conn, session_id, ids)

    def clear_messages(self, session_id: str) -> None:
        """Delete every message and every compaction of the session."""
        with self._write(session_id) as conn:
            self._next_revision(conn, session_id, reset=True)
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
        with self._write(session_id) as conn:
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
            self._next_revision(conn, session_id, reset=True)
            row = conn.execute(
                "INSERT INTO compactions "
                "(session_id, from_message_id, to_message_id, summary, created_at) "
                "VALUES (?, ?, ?, ?, ?) RETURNING id",
                (session_id, from_id, to_id, summary, time.time()),
            ).fetchone()
            return int(row[0])

    @staticmethod
    def _message_ids(conn: Any, session_id: str) -> list[str]:
        return [
            r[0]
            for r in conn.execute("SELECT message_id FROM messages WHERE session_id = ? ORDER BY seq", (session_id,))
        ]

    @staticmethod
    def _compactions(conn: Any, session_id: str) -> list[Compaction]:
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

    def history_changes(self, session_id: str, since: HistoryMark | None = None) -> HistoryChanges:
        """What changed in :meth:`history` since the read that returned ``since`` (see
        :class:`HistoryChanges`): the messages written after it, by an indexed look-up on the
        revision they were written at, or the whole history when ``since`` is ``None`` or a
        delete, a clear or a compaction came after it."""
        with self._read() as conn:
            if since is None:
                row = conn.execute(
                    "SELECT history_rev, history_reset FROM sessions WHERE session_id = ?", (session_id,)
                ).fetchone()
                revision = int(row[0]) if row is not None else 0
            else:
                # The session's revisions and the rows written since, in one statement (one
                # round trip on a server database): the common case, a turn's new messages.
                rows = conn.execute(
                    "SELECT s.history_rev, s.history_reset, m.seq, m.message_id, m.role, m.parts, m.metadata "
                    "FROM sessions s LEFT JOIN messages m ON m.session_id = s.session_id AND m.rev > ? "
                    "WHERE s.session_id = ? ORDER BY m.seq",
                    (since.revision, session_id),
                ).fetchall()
                revision, reset = (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)
                if reset <= since.revision <= revision:
                    rows = [r for r in rows if r["seq"] is not None]  # (a session with none: one row of NULLs)
                    appended = [self._message(r) for r in rows if r["seq"] > since.last_seq]
                    updated = [self._message(r) for r in rows if r["seq"] <= since.last_seq]
                    last_seq = max([since.last_seq, *(r["seq"] for r in rows)])
                    return HistoryChanges(HistoryMark(revision, last_seq), False, appended, updated)
            rows = conn.execute(
                "SELECT seq, message_id, role, parts, metadata FROM messages WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
            compactions = self._compactions(conn, session_id)
        messages = [self._message(r) for r in rows]
        history = apply_overlays(messages, effective_overlays([m.id for m in messages], compactions))
        return HistoryChanges(HistoryMark(revision, rows[-1]["seq"] if rows else 0), True, history, [])

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
        with self._write(session_id) as conn:
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
                (session_id, key, dumps(value), time.time()),
            )
