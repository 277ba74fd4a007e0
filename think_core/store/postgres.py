"""The PostgreSQL store, for running think on several machines: ``PostgresStore(url)``, or
``store="postgresql://…"`` / ``think serve --db postgresql://…``. Needs the extra ``postgres``
(psycopg 3 and psycopg-pool).

It runs the same row code as the SQLite store (see :mod:`think_core.store._rows`) on a pool of
connections. Writes to a session's rows are serialised per session (a transaction-level
advisory lock), which makes its read-then-write sequences — an idempotent accept, applying a
submission, retaking a lease — atomic across every process on every machine, as SQLite's one
write lock does on one file, while different sessions write in parallel. Claims also lock the
row they take (``FOR UPDATE SKIP LOCKED``). Reads see one snapshot (``REPEATABLE READ``).

Times are Unix seconds from each process's clock (as in SQLite), so the machines' clocks must
agree to well within a lease (NTP does); the leases of a dead process on another machine expire
by the clock of the process that retakes them.

Across processes it also provides (:class:`~think_core.store.shared.SharedSessions`) a turn lock
per session and word of the streams other processes open.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise ImportError(
        "the PostgreSQL store needs psycopg 3 and psycopg-pool: pip install 'think-agent[postgres]'"
    ) from exc

from ..errors import ConfigurationError, StoreUnavailable
from ._pg_schema import SCHEMA_VERSION, migrate
from ._pg_shared import PgSessionLock, PgSessionLocks, listen_streams, notify_stream
from ._rows import RowsBase
from ._session_rows import SessionRows
from ._stream_rows import StreamRows
from ._submission_rows import SubmissionRows
from .base import is_postgres_url
from .shared import StreamListener

__all__ = ["SCHEMA_VERSION", "PostgresStore", "is_postgres_url"]

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,47}$")
DEFAULT_SCHEMA = "think"
#: Seconds a store call waits for a pooled connection before it reports the database unavailable.
POOL_TIMEOUT = 5.0


@functools.lru_cache(maxsize=512)
def _placeholders(statement: str) -> str:
    """The row code's ``?`` placeholders as psycopg's ``%s`` (its SQL has no other ``?`` or ``%``)."""
    return statement.replace("?", "%s")


class _Row(dict[str, Any]):
    """A row readable by column name and by position, as ``sqlite3.Row`` is."""

    __slots__ = ("_values",)
    _values: Sequence[Any]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            return self._values[key]
        return dict.__getitem__(self, key)


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], _Row]:
    names = [column.name for column in cursor.description or ()]

    def make(values: Sequence[Any]) -> _Row:
        row = _Row(zip(names, values, strict=True))
        row._values = values
        return row

    return make


class _Connection:
    """A pooled connection speaking the row code's dialect (``?`` placeholders)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, statement: str, args: Sequence[Any] = ()) -> Any:
        return self._conn.execute(_placeholders(statement), args)

    def executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> Any:
        cursor = self._conn.cursor()
        cursor.executemany(_placeholders(statement), rows)
        return cursor


class PostgresConnection(RowsBase):
    """The pool a PostgreSQL store runs on, and its transactions."""

    IS = "IS NOT DISTINCT FROM"
    INSERTION_ORDER = "seq"
    LOCK_NEXT = " FOR UPDATE SKIP LOCKED"
    KEY_ORDER = ' COLLATE "C"'  # the order of the submissions_by_key index, whatever the database's
    DML_IN_WITH = True

    def __init__(
        self, url: str, *, schema: str | None = None, host: str | None = None, min_size: int = 1, max_size: int = 8
    ) -> None:
        self.url = url
        self.schema = schema or DEFAULT_SCHEMA
        if not _SCHEMA_NAME.match(self.schema) or self.schema.lower().startswith("pg_"):
            raise ConfigurationError(
                f"PostgreSQL schema name {self.schema!r}: letters, digits and _ only (at most 48), not starting with pg_"
            )
        self._init_owner(host)
        #: Store calls that may run at once (the async facade runs this many worker threads).
        self.max_concurrency = max_size
        self._closed = False
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn, self.schema)
        # A connection a database restart killed fails its next use before COMMIT
        # (StoreUnavailable, retried by the async store on a fresh one; the pool drops the broken
        # one) rather than being checked on every use, which costs a round trip per transaction.
        # A short `timeout`: a database that is down is reported and retried, not waited on.
        self._pool: ConnectionPool[Any] = ConnectionPool(
            url, min_size=min_size, max_size=max_size, open=True, configure=self._configure,
            kwargs={"autocommit": True}, name=f"think-{self.schema}",
            timeout=POOL_TIMEOUT, reconnect_timeout=3600,
        )
        self._locks = PgSessionLocks(url, self.schema)

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.row_factory = _row_factory
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))

    @contextmanager
    def _write(self, session_id: str | None = None) -> Iterator[_Connection]:
        # BEGIN and the session's write lock in one round trip (the simple query protocol
        # takes both statements at once; the key is computed here, so there is no parameter).
        joined = self._joined()
        if joined is not None:  # inside atomic(): one transaction, each session's lock taken once
            self._join_session(joined, session_id)
            yield joined
            return
        begin = "BEGIN" if session_id is None else f"BEGIN; {self._session_lock(session_id)}"
        with self._transaction(begin) as conn:
            yield conn

    def _session_lock(self, session_id: str) -> str:
        return f"SELECT pg_advisory_xact_lock({_lock_key(f'w:{self.schema}:{session_id}')})"

    def _join_session(self, conn: Any, session_id: str | None) -> None:
        sessions: set[str | None] = self._atomic_state().sessions
        if session_id not in sessions:
            sessions.add(session_id)
            if session_id is not None:
                conn.execute(self._session_lock(session_id))

    @contextmanager
    def _read(self) -> Iterator[_Connection]:
        joined = self._joined()
        if joined is not None:  # inside atomic(): the writes so far are seen, under the session's lock
            yield joined
            return
        with self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY") as conn:
            yield conn

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[_Connection]:
        if self._closed:
            raise RuntimeError("store is closed")
        try:
            with self._pool.connection() as conn:
                try:
                    conn.execute(begin)
                    yield _Connection(conn)
                except BaseException as exc:
                    with contextlib.suppress(psycopg.Error):  # a broken connection: the pool drops it
                        conn.execute("ROLLBACK")
                    if isinstance(exc, psycopg.OperationalError) and conn.broken:
                        # The server went away before COMMIT: nothing of it was committed.
                        raise StoreUnavailable(f"PostgreSQL connection lost: {exc}") from exc
                    raise
                # A failure of COMMIT itself leaves its outcome unknown: raised as it is.
                conn.execute("COMMIT")
        except PoolTimeout as exc:
            raise StoreUnavailable(f"no PostgreSQL connection could be had: {exc}") from exc

    def close(self) -> None:
        """Close the pool and the lock connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._locks.close()
        self._pool.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({_without_password(self.url)!r}, schema={self.schema!r})"

    @property
    def location(self) -> str:
        """Where the rows are, for messages to the user (no password)."""
        return f"{_without_password(self.url)} (schema {self.schema})"

    @property
    def in_memory(self) -> bool:
        return False


def _lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name``."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


def _without_password(url: str) -> str:
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", url)


class PostgresStore(SessionRows, StreamRows, SubmissionRows, PostgresConnection):
    """The PostgreSQL :class:`~think_core.store.base.Store` (and
    :class:`~think_core.store.shared.SharedSessions`). ``url`` is a libpq URL or conninfo;
    ``schema`` (default ``think``) holds the tables, created on first use; ``host`` is the name
    recorded as the owner host of the submissions this store runs."""

    def _stream_opened(self, conn: Any, session_id: str, stream_id: str) -> None:
        # NOTIFY in the transaction is delivered when it commits: a listener can read what it
        # hears of, and the notification costs no round trip of its own.
        notify_stream(conn, self.schema, self.owner_id, session_id, stream_id)

    def session_lock(self, session_id: str) -> PgSessionLock:
        return self._locks.lock(session_id)

    def listen_streams(self, callback: StreamListener) -> Callable[[], None]:
        return listen_streams(self.url, self.schema, self.owner_id, callback)
