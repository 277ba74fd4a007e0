"""PostgreSQL plumbing: the schema and its version, the connection pool, and transactions.

Every connection of the pool has its ``search_path`` set to the store's schema (created if
missing), so the row code's unqualified table names resolve there and several stores (tests,
tenants) can share one database without seeing each other's rows. The row code's ``?``
placeholders become psycopg's ``%s`` here, and rows answer by position and by column name.

``_write`` is a READ COMMITTED transaction: what SQLite gets from taking the write lock up front
(``BEGIN IMMEDIATE``), PostgreSQL gets from row locks (``FOR UPDATE``, :attr:`RowsBase.LOCK_ROWS`)
and ``ON CONFLICT`` in the statements themselves, so writers of different rows never wait for
each other. ``_read`` is a REPEATABLE READ, READ ONLY transaction: one snapshot for several
statements, and it can never fail with a serialization error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, LiteralString, cast

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from ._rows import RowsBase

SCHEMA_VERSION = 1

# Version 1, the baseline every schema starts from; later versions are migrations over it. Times
# are Unix seconds (DOUBLE PRECISION, as the engine compares them with time.time()); JSON is
# TEXT, kept byte for byte as the engine wrote it (the store never looks inside it).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    created_at DOUBLE PRECISION NOT NULL,
    ord BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE TABLE IF NOT EXISTS messages (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    message_id TEXT NOT NULL,
    role TEXT NOT NULL,
    parts TEXT NOT NULL,
    metadata TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    UNIQUE (session_id, message_id)
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages (session_id, seq);
CREATE TABLE IF NOT EXISTS compactions (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    from_message_id TEXT NOT NULL,
    to_message_id TEXT NOT NULL,
    summary TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS compactions_by_session ON compactions (session_id, id);
CREATE TABLE IF NOT EXISTS submissions (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    submission_id TEXT NOT NULL,
    idempotency_key TEXT,
    status TEXT NOT NULL CHECK (status IN
        ('pending', 'running', 'completed', 'error', 'aborted', 'skipped')),
    error TEXT,
    metadata TEXT,
    messages TEXT NOT NULL,
    messages_applied_at DOUBLE PRECISION,
    created_at DOUBLE PRECISION NOT NULL,
    started_at DOUBLE PRECISION,
    completed_at DOUBLE PRECISION,
    heartbeat_at DOUBLE PRECISION,
    owner TEXT,
    owner_host TEXT,
    owner_pid INTEGER,
    owner_started DOUBLE PRECISION,
    owner_namespace TEXT,
    lease DOUBLE PRECISION,
    answer_message_id TEXT,
    progress INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_id, submission_id),
    UNIQUE (session_id, idempotency_key)
);
CREATE INDEX IF NOT EXISTS submissions_by_status ON submissions (session_id, status, seq);
CREATE INDEX IF NOT EXISTS submissions_unfinished ON submissions (status, session_id)
    WHERE status IN ('pending', 'running');
CREATE TABLE IF NOT EXISTS submission_journal (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    submission_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_by_submission ON submission_journal (session_id, submission_id, seq);
CREATE TABLE IF NOT EXISTS streams (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    stream_id TEXT NOT NULL,
    status TEXT NOT NULL,
    continuation INTEGER NOT NULL DEFAULT 0,
    message_ids TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    ord BIGINT GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (session_id, stream_id)
);
CREATE TABLE IF NOT EXISTS stream_chunks (
    session_id TEXT NOT NULL,
    stream_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, stream_id, seq)
);
CREATE TABLE IF NOT EXISTS state (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (session_id, key)
)
"""
# The statements that take a schema from the previous version to this one (none yet).
_MIGRATIONS: dict[int, tuple[str, ...]] = {}


class Row:
    """A result row, by position (``row[0]``) and by column name (``row["status"]``)."""

    __slots__ = ("_index", "_values")

    def __init__(self, index: dict[str, int], values: Sequence[Any]) -> None:
        self._index, self._values = index, values

    def __getitem__(self, key: int | str) -> Any:
        return self._values[self._index[key]] if isinstance(key, str) else self._values[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        return list(self._index)


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    index = {column.name: i for i, column in enumerate(cursor.description or ())}
    return lambda values: Row(index, values)


_translated: dict[str, LiteralString] = {}


def _pg(query: str) -> LiteralString:
    """The row code's SQL with psycopg's placeholders (``?`` → ``%s``; a literal ``%`` doubled)."""
    found = _translated.get(query)
    if found is None:
        found = _translated[query] = cast(LiteralString, query.replace("%", "%%").replace("?", "%s"))
    return found


class PgCursorConnection:
    """A pooled connection as the row code uses it (``execute`` / ``executemany`` with ``?``)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    def execute(self, query: str, args: Sequence[Any] = ()) -> psycopg.Cursor[Row]:
        cursor = self.raw.cursor(row_factory=_row_factory)
        return cursor.execute(_pg(query), args)

    def executemany(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.raw.cursor() as cursor:
            cursor.executemany(_pg(query), rows)


def redact(url: str) -> str:
    """``url`` with its password (if any) hidden, for logs and ``repr``."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparsable conninfo>"
    if "password" not in params:
        return url
    params["password"] = "***"
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


class PgConnection(RowsBase):
    """The connection pool a PostgreSQL store runs on. ``url`` is a libpq connection string or
    URI; ``schema`` the schema its tables live in (default ``think``); ``host`` the host name
    recorded as the owner of the submissions this store runs; ``pool_size`` the most connections
    the pool opens; ``connect_timeout`` how long opening waits for the first one."""

    IS = "IS NOT DISTINCT FROM"
    INSERTION_ORDER = "ord"
    LOCK_NEXT = " FOR UPDATE SKIP LOCKED"
    LOCK_ROWS = " FOR UPDATE"

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        host: str | None = None,
        pool_size: int = 4,
        connect_timeout: float = 30.0,
    ) -> None:
        self.url = url
        self.schema = schema or "think"
        self._connect_timeout = connect_timeout
        self._init_owner(host)
        self._closed = False
        self._close_lock = threading.Lock()
        self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            open=False,
            configure=self._configure,
            name=f"think-{self.schema}",
            timeout=connect_timeout,
        )
        try:
            self._migrate()  # before any pooled connection sets its search_path to the schema
            self.pool.open(wait=True, timeout=connect_timeout)
        except BaseException:
            self.pool.close()
            self._closed = True
            raise

    # ------------------------------------------------------------------ plumbing

    def _set_search_path(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        self._set_search_path(conn)
        conn.commit()

    def _migrate(self) -> None:
        """Create the schema and its tables, or bring them up to :data:`SCHEMA_VERSION`, on a
        connection of its own. Stores opening at once take turns (a transaction-level advisory
        lock per schema), so only one of them creates the tables."""
        # libpq's own connect_timeout: an unreachable server fails here, not after the OS gives up.
        with psycopg.connect(self.url, connect_timeout=max(2, round(self._connect_timeout))) as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"think-migrate:{self.schema}",))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            self._set_search_path(conn)
            conn.execute("CREATE TABLE IF NOT EXISTS think_schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT max(version) FROM think_schema_version").fetchone()
            version = row[0] if row is not None and row[0] is not None else 0
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"store schema version {version} is newer than this code supports ({SCHEMA_VERSION})"
                )
            if version == SCHEMA_VERSION:
                return
            if version == 0:
                conn.execute(cast(LiteralString, _SCHEMA))  # several statements: no parameters
            for step in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[step]:
                    conn.execute(cast(LiteralString, statement))
            conn.execute("DELETE FROM think_schema_version")
            conn.execute("INSERT INTO think_schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("store is closed")

    @contextmanager
    def _write(self) -> Iterator[PgCursorConnection]:
        """A READ COMMITTED transaction on a pooled connection (committed at the end)."""
        self._check_open()
        with self.pool.connection() as conn, conn.transaction():
            yield PgCursorConnection(conn)

    @contextmanager
    def _read(self) -> Iterator[PgCursorConnection]:
        """A REPEATABLE READ, READ ONLY transaction: one snapshot for several statements."""
        self._check_open()
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield PgCursorConnection(conn)

    def close(self) -> None:
        """Close the pool. Idempotent."""
        with self._close_lock:
            if not self._closed:
                self._closed = True
                self.pool.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact(self.url)!r}, schema={self.schema!r})"

    @property
    def location(self) -> str:
        """Where the rows are, for messages to the user (no password)."""
        return f"{redact(self.url)} (schema {self.schema})"

    @property
    def in_memory(self) -> bool:
        """Never: a server other processes share."""
        return False
