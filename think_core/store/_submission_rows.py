"""The ``submissions`` table, for every backend: accept (idempotent), claim, renew, apply,
store the answer with the completion, finish, retake expired leases, requeue.

The store instance is the owner of the rows it claims or retakes (``owner_id``): renewing a
lease and storing an answer succeed only for the owner, so a process whose row was retaken
after its lease expired learns it lost it, and never answers it a second time."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import UnknownSubmission
from ..types import UIMessage
from ._journal_rows import SubmissionJournal
from ._rows import dumps
from .base import TERMINAL_SUBMISSION_STATUSES, Submission, SubmissionOwner, UnfinishedSubmission

# Who holds a row and until when: what a sweep for orphaned rows reads (no messages).
_HOLDER_COLUMNS = (
    "submission_id, session_id, status, created_at, started_at, heartbeat_at, "
    "owner, owner_host, owner_pid, owner_started, owner_namespace, lease"
)
_SUBMISSION_COLUMNS = (
    f"{_HOLDER_COLUMNS}, idempotency_key, error, metadata, messages, messages_applied_at, completed_at, "
    "answer_message_id, progress"
)
# Taking a row's lease: who the owner is, and for how long it holds it without a heartbeat
# (NULL when the taker names no lease: never the previous owner's, which it may not keep).
_TAKE_LEASE = (
    "heartbeat_at = ?, owner = ?, owner_host = ?, owner_pid = ?, owner_started = ?, owner_namespace = ?, "
    "lease = ?"
)


def _after_prefix(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` in code-point
    order (``None``: there is none)."""
    for i in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[i]) + 1
        code = 0xE000 if 0xD800 <= code <= 0xDFFF else code  # no surrogates in a stored key
        if code <= 0x10FFFF:
            return prefix[:i] + chr(code)
    return None


class SubmissionRows(SubmissionJournal):
    """Durable submissions, on the store's connection."""

    @staticmethod
    def _holder(row: Any) -> dict[str, Any]:
        """The fields of :data:`_HOLDER_COLUMNS`, as both records name them."""
        owner = None
        if row["owner"] is not None:
            owner = SubmissionOwner(
                id=row["owner"], host=row["owner_host"], pid=row["owner_pid"], started=row["owner_started"],
                namespace=row["owner_namespace"],
            )
        heartbeat, lease = row["heartbeat_at"], row["lease"]
        running = row["status"] == "running"
        return {
            "submission_id": row["submission_id"],
            "session_id": row["session_id"],
            "status": row["status"],
            "created_at": row["created_at"],
            "started_at": row["started_at"],
            "owner": owner,
            "heartbeat_at": heartbeat,
            "lease_expires_at": heartbeat + lease if running and heartbeat is not None and lease is not None else None,
        }

    @classmethod
    def _submission(cls, row: Any) -> Submission:
        metadata = row["metadata"]
        return Submission(
            **cls._holder(row),
            idempotency_key=row["idempotency_key"],
            request_id=row["submission_id"],
            error=row["error"],
            metadata=json.loads(metadata) if metadata is not None else None,
            messages=[UIMessage.model_validate(m) for m in json.loads(row["messages"])],
            messages_applied=row["messages_applied_at"] is not None,
            completed_at=row["completed_at"],
            answer_message_id=row["answer_message_id"],
            progress=row["progress"],
        )

    def submission_owner(self) -> SubmissionOwner:
        """This store as the owner of the rows it claims or retakes."""
        return self.owner

    def _lease_values(self, now: float, lease: float | None) -> tuple[Any, ...]:
        owner = self.owner
        return (now, owner.id, owner.host, owner.pid, owner.started, owner.namespace, lease)

    def _select_submission(
        self, conn: Any, session_id: str, where: str, args: tuple[Any, ...]
    ) -> Any:
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
        payload = dumps([m.model_dump(mode="json") for m in messages])
        with self._write(session_id) as conn:
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
                    dumps(metadata) if metadata is not None else None,
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

    def get_submission_by_key(self, session_id: str, idempotency_key: str) -> Submission | None:
        """The submission accepted with ``idempotency_key``: one look-up in the unique key index."""
        with self._read() as conn:
            row = self._select_submission(conn, session_id, "idempotency_key = ?", (idempotency_key,))
        return self._submission(row) if row is not None else None

    def submissions_by_key_prefix(self, session_id: str, prefix: str, limit: int | None = None) -> list[Submission]:
        """The submissions whose idempotency key starts with ``prefix``, latest first: a range of
        the key index (keys ordered by code point), so what it costs grows with the rows that
        match, not with the session's submissions."""
        if not prefix:
            raise ValueError("the key prefix must not be empty")
        key = f"idempotency_key{self.KEY_ORDER}"
        where, args = f"{key} >= ?", [prefix]
        upper = _after_prefix(prefix)
        if upper is not None:
            where, args = f"{where} AND {key} < ?", [prefix, upper]
        sql = f"SELECT {_SUBMISSION_COLUMNS} FROM submissions WHERE session_id = ? AND {where} ORDER BY seq DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._read() as conn:
            rows = conn.execute(sql, (session_id, *args)).fetchall()
        return [s for s in map(self._submission, rows) if (s.idempotency_key or "").startswith(prefix)]

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

    def claim_next_submission(
        self, session_id: str, *, in_order: bool = False, lease: float | None = None
    ) -> Submission | None:
        """Atomically move the oldest ``pending`` submission to ``running`` (setting
        ``started_at``) and return it; ``None`` when nothing is pending. Each pending row is
        claimed by exactly one caller, across connections and processes. ``in_order``: only
        when no submission accepted before it is still ``running`` (``None`` otherwise), so a
        session's submissions run one after the other in acceptance order. ``lease``: the
        seconds this store may go without a heartbeat before the row counts as orphaned."""
        statuses = "('pending', 'running')" if in_order else "('pending')"
        with self._write(session_id) as conn:
            # Row locks where the backend has them: in order, wait for a row another claimer
            # holds (it is the next one); otherwise skip it for the next pending one.
            lock = self.LOCK_NEXT if not in_order else self.LOCK_NEXT.replace(" SKIP LOCKED", "")
            row = conn.execute(
                f"SELECT submission_id, status FROM submissions WHERE session_id = ? "
                f"AND status IN {statuses} ORDER BY seq LIMIT 1{lock}",
                (session_id,),
            ).fetchone()
            if row is None or row["status"] != "pending":
                return None
            now = time.time()
            conn.execute(
                f"UPDATE submissions SET status = 'running', started_at = ?, {_TAKE_LEASE} "
                "WHERE session_id = ? AND submission_id = ? AND status = 'pending'",
                (now, *self._lease_values(now, lease), session_id, row[0]),
            )
            claimed = self._select_submission(conn, session_id, "submission_id = ?", (row[0],))
        return self._submission(claimed) if claimed is not None else None

    def heartbeat_submission(self, session_id: str, submission_id: str) -> bool:
        """Renew the lease of a ``running`` submission this store owns: recovery in another
        process leaves a row alone while its heartbeat is fresh. Returns whether the row is
        still running and still ours."""
        with self._write(session_id) as conn:
            return bool(
                conn.execute(
                    "UPDATE submissions SET heartbeat_at = ? WHERE session_id = ? AND submission_id = ? "
                    "AND status = 'running' AND owner = ?",
                    (time.time(), session_id, submission_id, self.owner_id),
                ).rowcount
            )

    def store_submission_answer(
        self,
        session_id: str,
        submission_id: str,
        message: UIMessage | None,
        status: str,
        error: str | None = None,
    ) -> bool:
        """Store the answer of a ``running`` submission this store owns and finish it with
        ``status``, in one transaction: the message is upserted (when there is one) and the row
        records it as its answer. Returns ``False``, writing nothing, when the row is not
        running or not ours any more."""
        if status not in TERMINAL_SUBMISSION_STATUSES:
            raise ValueError(f"status must be one of {TERMINAL_SUBMISSION_STATUSES}, not {status!r}")
        now = time.time()
        with self._write(session_id) as conn:
            changed = conn.execute(
                "UPDATE submissions SET status = ?, error = ?, completed_at = ?, answer_message_id = ? "
                "WHERE session_id = ? AND submission_id = ? AND status = 'running' AND owner = ?",
                (status, error, now, message.id if message is not None else None,
                 session_id, submission_id, self.owner_id),
            ).rowcount
            if changed:
                self._drop_journal(conn, session_id, submission_id)
            if changed and message is not None:
                self._upsert_message(conn, session_id, message, now)
            return bool(changed)

    def mark_submission_applied(self, session_id: str, submission_id: str) -> bool:
        """Record that the submission's messages were appended to the session. Returns
        ``False`` if the row does not exist or was already marked."""
        with self._write(session_id) as conn:
            return bool(
                conn.execute(
                    "UPDATE submissions SET messages_applied_at = ? WHERE session_id = ? "
                    "AND submission_id = ? AND messages_applied_at IS NULL",
                    (time.time(), session_id, submission_id),
                ).rowcount
            )

    def apply_submission_messages(
        self, session_id: str, submission_id: str, *, replacing_from: str | None = None
    ) -> list[UIMessage]:
        """Append the submission's messages to the session (idempotent by id) and mark it
        applied, in one transaction. ``replacing_from``: the stored message that and everything
        after it are deleted first, in the same transaction (an edit, a regeneration; nothing
        when it is not stored). Once applied, nothing happens again. Returns the messages
        actually appended. Raises :class:`~think_core.errors.UnknownSubmission` (a ``KeyError``)
        for an unknown submission."""
        with self._write(session_id) as conn:
            row = self._select_submission(conn, session_id, "submission_id = ?", (submission_id,))
            if row is None:
                raise UnknownSubmission(submission_id, session_id)
            sub = self._submission(row)
            if sub.messages_applied:
                return []
            # (no _ensure: the submission's row holds the session's by its foreign key)
            if replacing_from is not None:
                ids = [r[0] for r in conn.execute(
                    "SELECT message_id FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
                ).fetchall()]
                if replacing_from in ids:
                    self._delete_messages(conn, session_id, ids[ids.index(replacing_from) :])
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
        with self._write(session_id) as conn:
            changed = conn.execute(
                "UPDATE submissions SET status = ?, error = ?, completed_at = ? "
                "WHERE session_id = ? AND submission_id = ? "
                "AND status IN ('pending', 'running')",
                (status, error, time.time(), session_id, submission_id),
            ).rowcount
            if changed:
                self._drop_journal(conn, session_id, submission_id)
            return bool(changed)

    def retake_stale_submissions(
        self, session_id: str, *, stale_after: float | None = None, lease: float | None = None
    ) -> list[Submission]:
        """Take over ``running`` rows whose lease expired (last heartbeat, or start, at least
        ``stale_after`` seconds ago; every running row when ``None``): their lease is renewed
        for the caller in the same transaction, so two processes never retake the same row.
        Returns them in acceptance order; what to do with each is the caller's decision."""
        now = time.time()
        with self._write(session_id) as conn:
            rows = conn.execute(
                f"SELECT {_SUBMISSION_COLUMNS} FROM submissions WHERE session_id = ? "
                "AND status = 'running' ORDER BY seq",
                (session_id,),
            ).fetchall()
            taken = []
            for row in rows:
                last_seen = row["heartbeat_at"] or row["started_at"] or 0
                if stale_after is not None and last_seen > now - stale_after:
                    continue
                conn.execute(
                    f"UPDATE submissions SET {_TAKE_LEASE} WHERE session_id = ? AND submission_id = ?",
                    (*self._lease_values(now, lease), session_id, row["submission_id"]),
                )
                taken.append(self._submission(row))
        return taken

    def retake_submission(
        self,
        session_id: str,
        submission_id: str,
        *,
        if_owner: str | None,
        if_heartbeat_at: float | None,
        lease: float | None = None,
    ) -> Submission | None:
        """Take over one ``running`` row, only if it is still held by ``if_owner`` with its last
        heartbeat at ``if_heartbeat_at`` (what the caller saw when it judged the owner dead or
        its lease expired): an owner that renewed meanwhile keeps it. Returns the row as it was
        before the takeover, or ``None`` when nothing changed."""
        with self._write(session_id) as conn:
            row = self._select_submission(
                conn, session_id, f"submission_id = ? AND status = 'running' AND owner {self.IS} ? AND heartbeat_at {self.IS} ?",
                (submission_id, if_owner, if_heartbeat_at),
            )
            if row is None:
                return None
            conn.execute(
                f"UPDATE submissions SET {_TAKE_LEASE} WHERE session_id = ? AND submission_id = ?",
                (*self._lease_values(time.time(), lease), session_id, submission_id),
            )
        return self._submission(row)

    def running_submissions(self) -> list[Submission]:
        """Every ``running`` submission of every session, in acceptance order."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_SUBMISSION_COLUMNS} FROM submissions WHERE status = 'running' ORDER BY seq"
            ).fetchall()
        return [self._submission(r) for r in rows]

    def requeue_submission(self, session_id: str, submission_id: str) -> bool:
        """Put a ``running`` row whose messages were never applied back to ``pending`` (it runs
        again from the start). Returns whether a row changed."""
        with self._write(session_id) as conn:
            return bool(
                conn.execute(
                    "UPDATE submissions SET status = 'pending', started_at = NULL "
                    "WHERE session_id = ? AND submission_id = ? AND status = 'running' "
                    "AND messages_applied_at IS NULL",
                    (session_id, submission_id),
                ).rowcount
            )

    def unfinished_submissions(self) -> list[UnfinishedSubmission]:
        """Every ``pending`` or ``running`` submission of every store's session, in acceptance
        order, without its messages: one query over the index of unfinished rows, so what it
        costs grows with the submissions in flight, not with the sessions stored."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_HOLDER_COLUMNS} FROM submissions WHERE status IN ('pending', 'running') ORDER BY seq"
            ).fetchall()
        return [UnfinishedSubmission(**self._holder(r)) for r in rows]

    def pending_session_ids(self) -> list[str]:
        """Sessions with ``pending`` or ``running`` submissions."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT session_id FROM submissions WHERE status IN ('pending', 'running') "
                "GROUP BY session_id ORDER BY MIN(seq)"
            ).fetchall()
        return [r[0] for r in rows]

