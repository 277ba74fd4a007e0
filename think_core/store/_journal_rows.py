"""The step journal of running submissions (``submission_journal``), for every backend."""

from __future__ import annotations

import json
import time
from typing import Any

from ._rows import RowsBase, dumps
from .base import JournalEntry

# Advancing a running row's progress marker (and renewing its lease), if the row is this store's.
_ADVANCE = (
    "UPDATE submissions SET progress = progress + 1, heartbeat_at = ? WHERE session_id = ? "
    "AND submission_id = ? AND status = 'running' AND owner = ?"
)
_INSERT = "INSERT INTO submission_journal (session_id, submission_id, kind, key, data, created_at)"


class SubmissionJournal(RowsBase):
    """Journal entries of running submissions, on the store's connection."""

    def journal_submission(
        self, session_id: str, submission_id: str, kind: str, key: str, data: dict[str, Any]
    ) -> bool:
        """Append an entry to the step journal of a ``running`` submission this store owns, in
        the transaction that advances its progress marker and renews its lease. Returns
        ``False``, writing nothing, when the row is not running or not ours."""
        now = time.time()
        mine = (now, session_id, submission_id, self.owner_id)
        entry = (session_id, submission_id, kind, key, dumps(data), now)
        with self._write(session_id) as conn:
            if self.DML_IN_WITH:  # one statement: the entry is inserted only if the row was ours
                return bool(conn.execute(f"WITH mine AS ({_ADVANCE} RETURNING 1) {_INSERT} SELECT ?, ?, ?, ?, ?, ? FROM mine",
                                         mine + entry).rowcount)
            if not conn.execute(_ADVANCE, mine).rowcount:
                return False
            conn.execute(f"{_INSERT} VALUES (?, ?, ?, ?, ?, ?)", entry)
            return True

    def submission_journal(self, session_id: str, submission_id: str) -> list[JournalEntry]:
        """The journal of a submission, oldest entry first (empty once it finished)."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT seq, kind, key, data, created_at FROM submission_journal "
                "WHERE session_id = ? AND submission_id = ? ORDER BY seq",
                (session_id, submission_id),
            ).fetchall()
        return [
            JournalEntry(seq=r["seq"], kind=r["kind"], key=r["key"], data=json.loads(r["data"]),
                         created_at=r["created_at"])
            for r in rows
        ]

    @staticmethod
    def _drop_journal(conn: Any, session_id: str, submission_id: str) -> None:
        """A finished submission needs its journal no more."""
        conn.execute(
            "DELETE FROM submission_journal WHERE session_id = ? AND submission_id = ?", (session_id, submission_id)
        )
