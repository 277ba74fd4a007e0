"""The PostgreSQL store's schema, its version and migrations.

The tables mirror the SQLite store's (the row code is shared): times are Unix seconds as
``DOUBLE PRECISION``, JSON is kept as text, and every table that is ordered by insertion has an
identity ``seq``. The version lives in ``think_schema_version``; a migration runs in one
transaction under an advisory lock, so servers starting together on a new database do not race.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from ..messages import PENDING_TOOL_STATES
from ._rows import HISTORY_REVISIONS

SCHEMA_VERSION = 4

# Version 1, the baseline; later versions are the numbered steps of _MIGRATIONS.
_BASELINE = (
    """CREATE TABLE sessions (
        seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        session_id TEXT PRIMARY KEY,
        created_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE messages (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
        message_id TEXT NOT NULL,
        role TEXT NOT NULL,
        parts TEXT NOT NULL,
        metadata TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        UNIQUE (session_id, message_id)
    )""",
    "CREATE INDEX messages_by_session ON messages (session_id, seq)",
    """CREATE TABLE compactions (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
        from_message_id TEXT NOT NULL,
        to_message_id TEXT NOT NULL,
        summary TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX compactions_by_session ON compactions (session_id, id)",
    """CREATE TABLE submissions (
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
        answer_message_id TEXT,
        progress INTEGER NOT NULL DEFAULT 0,
        owner_host TEXT,
        owner_pid INTEGER,
        owner_started DOUBLE PRECISION,
        owner_namespace TEXT,
        lease DOUBLE PRECISION,
        UNIQUE (session_id, submission_id),
        UNIQUE (session_id, idempotency_key)
    )""",
    "CREATE INDEX submissions_by_status ON submissions (session_id, status, seq)",
    "CREATE INDEX submissions_unfinished ON submissions (status, session_id) WHERE status IN ('pending', 'running')",
    """CREATE TABLE submission_journal (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
        submission_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX journal_by_submission ON submission_journal (session_id, submission_id, seq)",
    """CREATE TABLE streams (
        seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
        stream_id TEXT NOT NULL,
        status TEXT NOT NULL,
        continuation INTEGER NOT NULL DEFAULT 0,
        message_ids TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, stream_id)
    )""",
    """CREATE TABLE stream_chunks (
        session_id TEXT NOT NULL,
        stream_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, stream_id, seq)
    )""",
    """CREATE TABLE state (
        session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, key)
    )""",
)
# The statements that take a database from the previous version to this one.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # Idempotency keys in code-point order, for a look-up by key prefix (submissions_by_key_prefix)
    # that does not depend on the database's collation.
    2: ('CREATE INDEX submissions_by_key ON submissions (session_id, (idempotency_key COLLATE "C"))',),
    # The assistant messages holding a tool call that waits for the client, marked and indexed:
    # a chat request checks the answers it brings against them without reading the whole history.
    # (``json``, not ``jsonb``: the parts are kept as written, and jsonb refuses a ``\u0000``.)
    3: (
        "ALTER TABLE messages ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0",
        "UPDATE messages SET waiting = 1 WHERE role = 'assistant' AND EXISTS ("
        " SELECT 1 FROM json_array_elements(messages.parts::json) AS part WHERE json_typeof(part) = 'object'"
        " AND (left(part->>'type', 5) = 'tool-' OR part->>'type' = 'dynamic-tool')"
        f" AND part->>'state' IN ({', '.join(map(repr, sorted(PENDING_TOOL_STATES)))}))",
        "CREATE INDEX messages_waiting ON messages (session_id, seq) WHERE waiting = 1",
    ),
    # Each session's history revision, and the revision each message row was last written at:
    # what changed since a cached history is read by index (Store.history_changes).
    4: HISTORY_REVISIONS,
}


def migrate(conn: Any, schema: str) -> int:
    """Create ``schema`` or bring it up to :data:`SCHEMA_VERSION` (``conn`` in autocommit);
    returns the version found. Refuses a database a newer think wrote."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"think-migrate:{schema}",))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        conn.execute("CREATE TABLE IF NOT EXISTS think_schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM think_schema_version").fetchone()
        found = int(row[0]) if row is not None else 0
        if found > SCHEMA_VERSION:
            raise RuntimeError(
                f"store schema version {found} in schema {schema!r} is newer than this code supports ({SCHEMA_VERSION})"
            )
        if found == 0:
            for statement in _BASELINE:
                conn.execute(statement)
            conn.execute("INSERT INTO think_schema_version (version) VALUES (1)")
            found_or_baseline = 1
        else:
            found_or_baseline = found
        for step in range(found_or_baseline + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[step]:
                conn.execute(statement)
        if found_or_baseline < SCHEMA_VERSION:
            conn.execute("UPDATE think_schema_version SET version = %s", (SCHEMA_VERSION,))
    return found
