"""The ``streams`` and ``stream_chunks`` tables, for every backend: each streaming turn's UI
message chunks, kept while it runs (and the latest finished one after it), so that a client
joining late replays the turn from its first chunk and follows it."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from ._rows import RowsBase, dumps
from .base import StreamInfo

_STREAM_COLUMNS = "session_id, stream_id, status, continuation, message_ids, created_at, updated_at"


class StreamRows(RowsBase):
    """Resumable streams, on the store's connection."""

    @staticmethod
    def _stream(conn: Any, row: Any) -> StreamInfo:
        length = conn.execute(
            "SELECT COUNT(*) FROM stream_chunks WHERE session_id = ? AND stream_id = ?",
            (row["session_id"], row["stream_id"]),
        ).fetchone()[0]
        ids = row["message_ids"]
        return StreamInfo(
            session_id=row["session_id"],
            stream_id=row["stream_id"],
            status=row["status"],
            continuation=bool(row["continuation"]),
            message_ids=json.loads(ids) if ids is not None else None,
            length=length,
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def open_stream(
        self, session_id: str, stream_id: str, *, continuation: bool = False, message_ids: Sequence[str] | None = None
    ) -> StreamInfo:
        """Start the stream ``stream_id`` — or take it up again, chunks kept, when it exists (a
        turn resumed after a restart). Starting a new one forgets the session's finished ones."""
        now = time.time()
        with self._write(session_id) as conn:
            self._ensure(conn, session_id)
            finished = [
                r[0]
                for r in conn.execute(
                    "SELECT stream_id FROM streams WHERE session_id = ? AND stream_id != ? AND status != 'streaming'",
                    (session_id, stream_id),
                )
            ]
            for old in finished:
                conn.execute("DELETE FROM stream_chunks WHERE session_id = ? AND stream_id = ?", (session_id, old))
                conn.execute("DELETE FROM streams WHERE session_id = ? AND stream_id = ?", (session_id, old))
            ids = dumps(list(message_ids)) if message_ids is not None else None
            conn.execute(
                "INSERT INTO streams (session_id, stream_id, status, continuation, message_ids, created_at, updated_at) "
                "VALUES (?, ?, 'streaming', ?, ?, ?, ?) ON CONFLICT (session_id, stream_id) DO UPDATE SET "
                "status = 'streaming', updated_at = excluded.updated_at",
                (session_id, stream_id, int(continuation), ids, now, now),
            )
            row = conn.execute(
                f"SELECT {_STREAM_COLUMNS} FROM streams WHERE session_id = ? AND stream_id = ?", (session_id, stream_id)
            ).fetchone()
            self._stream_opened(conn, session_id, stream_id)
            return self._stream(conn, row)

    def _stream_opened(self, conn: Any, session_id: str, stream_id: str) -> None:
        """Tell other processes of the stream, once the transaction opening it commits (a
        backend sharing its database with other processes does; see ``PostgresStore``)."""

    def append_stream_chunks(self, session_id: str, stream_id: str, first_seq: int, bodies: Sequence[str]) -> None:
        """Store ``bodies`` as chunks ``first_seq, first_seq + 1, …`` (a chunk already stored
        under a seq is kept: appending is idempotent)."""
        if not bodies:
            return
        with self._write(session_id) as conn:
            conn.executemany(
                "INSERT INTO stream_chunks (session_id, stream_id, seq, body) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (session_id, stream_id, seq) DO NOTHING",
                [(session_id, stream_id, first_seq + i, body) for i, body in enumerate(bodies)],
            )
            conn.execute(
                "UPDATE streams SET updated_at = ? WHERE session_id = ? AND stream_id = ?",
                (time.time(), session_id, stream_id),
            )

    def truncate_stream(self, session_id: str, stream_id: str, length: int) -> None:
        """Keep only the first ``length`` chunks."""
        with self._write(session_id) as conn:
            conn.execute(
                "DELETE FROM stream_chunks WHERE session_id = ? AND stream_id = ? AND seq >= ?",
                (session_id, stream_id, length),
            )

    def finish_stream(self, session_id: str, stream_id: str, status: str) -> bool:
        """Record the stream's outcome; ``False`` when there is no such stream."""
        with self._write(session_id) as conn:
            return bool(
                conn.execute(
                    "UPDATE streams SET status = ?, updated_at = ? WHERE session_id = ? AND stream_id = ?",
                    (status, time.time(), session_id, stream_id),
                ).rowcount
            )

    def get_stream(self, session_id: str, stream_id: str | None = None) -> StreamInfo | None:
        """The stream ``stream_id``, or (``None``) the session's running one, else its latest."""
        with self._read() as conn:
            if stream_id is not None:
                row = conn.execute(
                    f"SELECT {_STREAM_COLUMNS} FROM streams WHERE session_id = ? AND stream_id = ?",
                    (session_id, stream_id),
                ).fetchone()
            else:
                row = conn.execute(
                    f"SELECT {_STREAM_COLUMNS} FROM streams WHERE session_id = ? "
                    f"ORDER BY status = 'streaming' DESC, created_at DESC, {self.INSERTION_ORDER} DESC LIMIT 1",
                    (session_id,),
                ).fetchone()
            return self._stream(conn, row) if row is not None else None

    def stream_chunks(self, session_id: str, stream_id: str, start: int = 0) -> list[str]:
        """The chunk bodies from ``seq == start`` on, in order."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT body FROM stream_chunks WHERE session_id = ? AND stream_id = ? AND seq >= ? ORDER BY seq",
                (session_id, stream_id, start),
            ).fetchall()
        return [r[0] for r in rows]
