"""The PostgreSQL store: the same rows as the SQLite store, on a server every machine can share.

Needs the ``postgres`` extra (``psycopg`` 3 and ``psycopg-pool``). A store holds a
:class:`psycopg_pool.ConnectionPool` (``store.pool``; a caller that needs a connection of its
own, for ``LISTEN`` or session-level locks, opens one from ``store.url``), and keeps every table
in one schema (``schema=``, default ``think``, created if missing), so several deployments or
test runs can share a database. The schema's version is kept in its ``think_schema_version``
table; opening migrates an older schema and refuses a newer one.

Concurrency: any number of stores, in any number of processes on any number of machines, can
drain one session's queue. A claim reads the next pending row ``FOR UPDATE SKIP LOCKED`` and
takes its lease in that transaction, so each submission is claimed once; retaking expired leases
locks the rows it reads (``FOR UPDATE``), so two watchers never both retake one.

Times are ``time.time()`` of the writing process, as in the SQLite store, not the database's
clock: the engine judges a lease expired by comparing ``heartbeat_at + lease`` with its own
``time.time()``, so stamping rows with the database clock would compare two clocks instead of
one on the host that wrote the heartbeat. Across machines this asks for clocks kept in step
(NTP): a skew much smaller than the lease (seconds against tens of seconds by default).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ._pg_connection import SCHEMA_VERSION, PgConnection, PgCursorConnection
from ._pg_shared import PgSessionLock, PgSessionLocks, listen_streams, notify_stream
from ._session_rows import SessionRows
from ._stream_rows import StreamRows
from ._submission_rows import SubmissionRows
from .shared import StreamListener

__all__ = ["SCHEMA_VERSION", "PostgresStore"]


class PostgresStore(SessionRows, StreamRows, SubmissionRows, PgConnection):
    """The PostgreSQL :class:`~think_core.store.base.Store` (and
    :class:`~think_core.store.shared.SharedSessions`). ``url``: a ``postgresql://`` URI or a
    libpq connection string. Use as a context manager or call :meth:`close`."""

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        host: str | None = None,
        pool_size: int = 4,
        connect_timeout: float = 30.0,
    ) -> None:
        super().__init__(url, schema=schema, host=host, pool_size=pool_size, connect_timeout=connect_timeout)
        self._locks: PgSessionLocks | None = None
        self._locks_guard = threading.Lock()

    def session_lock(self, session_id: str) -> PgSessionLock:
        """The lock of ``session_id`` across every store on this schema (an advisory lock)."""
        with self._locks_guard:
            if self._locks is None:
                self._locks = PgSessionLocks(self.url, self.schema)
            return self._locks.lock(session_id)

    def listen_streams(self, callback: StreamListener) -> Callable[[], None]:
        """Call ``callback(session_id, stream_id)`` for every stream another store opens."""
        return listen_streams(self.url, self.schema, self.owner_id, callback)

    def _stream_opened(self, conn: Any, session_id: str, stream_id: str) -> None:
        assert isinstance(conn, PgCursorConnection)
        notify_stream(conn.raw, self.schema, self.owner_id, session_id, stream_id)

    def close(self) -> None:
        """Close the pool (and the connection holding this store's session locks). Idempotent."""
        with self._locks_guard:
            locks, self._locks = self._locks, None
        if locks is not None:
            locks.close()
        super().close()
