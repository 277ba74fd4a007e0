"""Where the tool cache keeps its entries: in this process's memory, or in a SQLite file shared
by every agent and process that points at it (see ``caching.py``)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Protocol

#: The scope of entries shared by every session (``scope = "global"``).
GLOBAL_SCOPE = ""


@dataclass(frozen=True)
class Lookup:
    """A backend's answer: the value if ``found``; ``expired`` if an entry was dropped for its
    age; ``generation`` of the scope, read in the same transaction as the entry."""

    found: bool
    value: Any = None
    expired: bool = False
    generation: int = 0


class Backend(Protocol):
    """Storage of cache entries. ``put`` stores only while ``scope``'s generation still equals
    ``generation`` (no invalidation since the lookup) and returns ``(stored, evicted)``."""

    def get(self, scope: str, key: str, now: float) -> Lookup: ...
    def put(
        self, scope: str, key: str, value_json: str, expires_at: float | None, generation: int
    ) -> tuple[bool, int]: ...
    def invalidate(self, scope: str | None) -> None: ...


class MemoryBackend:
    """An ``OrderedDict`` per process: LRU order is insertion/move order."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], tuple[str, float | None]] = OrderedDict()
        self._generations: dict[str, int] = {}

    def get(self, scope: str, key: str, now: float) -> Lookup:
        generation = self.generation(scope)
        entry = self._entries.get((scope, key))
        if entry is None:
            return Lookup(False, generation=generation)
        value_json, expires_at = entry
        if expires_at is not None and expires_at <= now:
            del self._entries[(scope, key)]
            return Lookup(False, expired=True, generation=generation)
        self._entries.move_to_end((scope, key))
        return Lookup(True, json.loads(value_json), generation=generation)

    def generation(self, scope: str) -> int:
        return self._generations.get(scope, 0)

    def put(
        self, scope: str, key: str, value_json: str, expires_at: float | None, generation: int
    ) -> tuple[bool, int]:
        if self.generation(scope) != generation:
            return False, 0
        self._entries[(scope, key)] = (value_json, expires_at)
        self._entries.move_to_end((scope, key))
        evicted = 0
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
            evicted += 1
        return True, evicted

    def invalidate(self, scope: str | None) -> None:
        if scope is None:
            self._entries.clear()
            scopes = set(self._generations) | {GLOBAL_SCOPE}
        else:
            for entry_key in [k for k in self._entries if k[0] == scope]:
                del self._entries[entry_key]
            scopes = {scope}
        for name in scopes:
            self._generations[name] = self._generations.get(name, 0) + 1


_SCHEMA = """
CREATE TABLE IF NOT EXISTS tool_cache (
    scope      TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    expires_at REAL,
    last_used  INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS tool_cache_lru ON tool_cache (last_used);
CREATE TABLE IF NOT EXISTS tool_cache_generation (
    scope      TEXT PRIMARY KEY,
    generation INTEGER NOT NULL
);
"""


class SQLiteBackend:
    """A SQLite file shared across agents and processes.

    Each operation uses a fresh connection that is closed before returning: the plugin has no
    shutdown hook, and a connection that outlives its owner leaks a file handle. Writes run in
    ``BEGIN IMMEDIATE`` transactions, so the generation check and the insert are atomic across
    processes. ``last_used`` is a counter (not a clock) so LRU order is exact.
    """

    def __init__(self, path: str, max_entries: int, busy_timeout_ms: int = 5000) -> None:
        self.path = path
        self.max_entries = max_entries
        self.busy_timeout_ms = busy_timeout_ms
        self._initialised = False
        self._init_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            if not self._initialised:
                with self._init_lock:
                    if not self._initialised:
                        conn.execute("PRAGMA journal_mode = WAL")
                        conn.executescript(_SCHEMA)
                        self._initialised = True
        except BaseException:
            conn.close()
            raise
        return conn

    def get(self, scope: str, key: str, now: float) -> Lookup:
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")  # a hit updates last_used: take the write lock now
            try:
                generation = self._generation(conn, scope)
                row = conn.execute(
                    "SELECT value, expires_at FROM tool_cache WHERE scope = ? AND key = ?",
                    (scope, key),
                ).fetchone()
                if row is None:
                    lookup = Lookup(False, generation=generation)
                elif row[1] is not None and row[1] <= now:
                    conn.execute("DELETE FROM tool_cache WHERE scope = ? AND key = ?", (scope, key))
                    lookup = Lookup(False, expired=True, generation=generation)
                else:
                    conn.execute(
                        "UPDATE tool_cache SET last_used = "
                        "(SELECT COALESCE(MAX(last_used), 0) + 1 FROM tool_cache) "
                        "WHERE scope = ? AND key = ?",
                        (scope, key),
                    )
                    lookup = Lookup(True, json.loads(row[0]), generation=generation)
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        return lookup

    @staticmethod
    def _generation(conn: sqlite3.Connection, scope: str) -> int:
        row = conn.execute(
            "SELECT generation FROM tool_cache_generation WHERE scope = ?", (scope,)
        ).fetchone()
        return row[0] if row else 0

    def put(
        self, scope: str, key: str, value_json: str, expires_at: float | None, generation: int
    ) -> tuple[bool, int]:
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if self._generation(conn, scope) != generation:
                    conn.execute("COMMIT")
                    return False, 0
                conn.execute(
                    "INSERT OR REPLACE INTO tool_cache (scope, key, value, expires_at, last_used) "
                    "VALUES (?, ?, ?, ?, (SELECT COALESCE(MAX(last_used), 0) + 1 FROM tool_cache))",
                    (scope, key, value_json, expires_at),
                )
                evicted = conn.execute(
                    "DELETE FROM tool_cache WHERE rowid IN (SELECT rowid FROM tool_cache "
                    "ORDER BY last_used DESC LIMIT -1 OFFSET ?)",
                    (self.max_entries,),
                ).rowcount
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        return True, max(evicted, 0)

    def invalidate(self, scope: str | None) -> None:
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if scope is None:
                    conn.execute("DELETE FROM tool_cache")
                    conn.execute("UPDATE tool_cache_generation SET generation = generation + 1")
                    # a scope without a row is at generation 0: its first bump inserts 1
                    conn.execute(
                        "INSERT OR IGNORE INTO tool_cache_generation VALUES (?, 1)", (GLOBAL_SCOPE,)
                    )
                else:
                    conn.execute("DELETE FROM tool_cache WHERE scope = ?", (scope,))
                    conn.execute(
                        "INSERT INTO tool_cache_generation (scope, generation) VALUES (?, 1) "
                        "ON CONFLICT(scope) DO UPDATE SET generation = generation + 1",
                        (scope,),
                    )
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")
