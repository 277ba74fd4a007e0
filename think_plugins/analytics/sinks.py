"""Where analytics data points go: the SQLite, JSONL and HTTP sinks, and the readers of the
two files (used by ``think analytics report``)."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Literal, Protocol, TypedDict

import httpx

from .settings import AnalyticsSettings, default_db_path, default_jsonl_path

__all__ = [
    "DataPoint",
    "HTTPSink",
    "JSONLSink",
    "SQLiteSink",
    "Sink",
    "SinkError",
    "build_sink",
    "read_jsonl_points",
    "read_sqlite_points",
]

logger = logging.getLogger("think.plugins.analytics")

_RETRY_STATUSES = frozenset({408, 425, 429})


class DataPoint(TypedDict):
    """One record (see the module docstring for the meaning of each position)."""

    kind: Literal["tool_call", "step", "turn"]
    timestamp: float
    request_id: str
    blobs: list[str]
    doubles: list[float]
    indexes: list[str]


class SinkError(Exception):
    """A sink could not write a batch (the batch is dropped)."""


class Sink(Protocol):
    """Where points go. ``background`` sinks are written by a task that no turn waits for."""

    background: bool

    async def write(self, points: list[DataPoint]) -> None: ...
    async def aclose(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS data_points (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp  REAL NOT NULL,
    kind       TEXT NOT NULL,
    request_id TEXT NOT NULL,
    blobs      TEXT NOT NULL,
    doubles    TEXT NOT NULL,
    indexes    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS data_points_kind ON data_points (kind, timestamp);
"""


class SQLiteSink:
    """Appends to table ``data_points`` (blobs/doubles/indexes as JSON arrays).

    A connection per batch, closed right away: the plugin has no shutdown hook it can rely on,
    and several agents or processes may write the same file (WAL, busy timeout).
    """

    background = False

    def __init__(self, path: str, busy_timeout_ms: int = 5000, *, make_parent: bool = False) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        # The default file's directory (think's data directory) is made on the first write; a
        # path the user named is written as named.
        self._make_parent = make_parent
        self._schema_ready = False

    def _write(self, points: list[DataPoint]) -> None:
        if self._make_parent and not self._schema_ready:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000)) as conn:
            if not self._schema_ready:
                conn.execute("PRAGMA journal_mode = WAL")  # persistent: set once per file
                conn.executescript(_SCHEMA)
                self._schema_ready = True
            # WAL with synchronous=NORMAL: a commit does not wait for fsync (analytics may lose
            # the last points on a power cut, never on a process crash), which keeps turns fast.
            conn.execute("PRAGMA synchronous = NORMAL")
            with conn:
                conn.executemany(
                    "INSERT INTO data_points (timestamp, kind, request_id, blobs, doubles, indexes)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (
                            p["timestamp"], p["kind"], p["request_id"], json.dumps(p["blobs"]),
                            json.dumps(p["doubles"]), json.dumps(p["indexes"]),
                        )
                        for p in points
                    ],
                )

    async def write(self, points: list[DataPoint]) -> None:
        await asyncio.to_thread(self._write, points)

    async def aclose(self) -> None:
        return None


class JSONLSink:
    """Appends one JSON object per line; the file is opened and closed per batch."""

    background = False

    def __init__(self, path: str, *, make_parent: bool = False) -> None:
        self.path = path
        self._make_parent = make_parent  # as SQLiteSink's

    def _write(self, points: list[DataPoint]) -> None:
        text = "".join(json.dumps(p, separators=(",", ":")) + "\n" for p in points)
        if self._make_parent:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(text)

    async def write(self, points: list[DataPoint]) -> None:
        await asyncio.to_thread(self._write, points)

    async def aclose(self) -> None:
        return None


class HTTPSink:
    """POSTs batches to a collector with retries (see the module docstring).

    The ``httpx.AsyncClient`` is created on first use inside the running event loop and closed
    by :meth:`aclose`; a client is tied to its loop, so one made in an older loop is replaced.
    """

    background = True

    def __init__(self, settings: AnalyticsSettings) -> None:
        self.settings = settings
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def _client_now(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = httpx.AsyncClient(
                timeout=self.settings.timeout_seconds, headers=self.settings.headers
            )
            self._client_loop = loop
        return self._client

    async def write(self, points: list[DataPoint]) -> None:
        client = self._client_now()
        settings = self.settings
        url = settings.url or ""
        attempt = 0
        while True:
            try:
                response = await client.post(url, json={"points": points})
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 300:
                    return
                problem = f"HTTP {response.status_code}"
                if response.status_code not in _RETRY_STATUSES and response.status_code < 500:
                    raise SinkError(f"collector {url} refused the batch: {problem}")
            if attempt >= settings.max_retries:
                raise SinkError(f"collector {url} failed after {attempt + 1} attempt(s): {problem}")
            delay = min(settings.max_backoff_seconds, settings.backoff_seconds * 2**attempt)
            logger.info("analytics: collector %s failed (%s); retrying in %.2fs", url, problem, delay)
            await asyncio.sleep(delay)
            attempt += 1

    async def aclose(self) -> None:
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.aclose()


def build_sink(settings: AnalyticsSettings) -> Sink:
    """The sink the settings name."""
    if settings.sink == "http":
        return HTTPSink(settings)
    if settings.sink == "jsonl":
        if settings.path:
            return JSONLSink(settings.path)
        return JSONLSink(str(default_jsonl_path()), make_parent=True)
    if settings.path:
        return SQLiteSink(settings.path)
    return SQLiteSink(str(default_db_path()), make_parent=True)


def read_sqlite_points(path: str | Path) -> list[DataPoint]:
    """All points of a SQLite sink file, oldest first. Opened read-only: a wrong path is an
    error (``sqlite3.OperationalError``), not a new empty database."""
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        rows = conn.execute(
            "SELECT timestamp, kind, request_id, blobs, doubles, indexes FROM data_points "
            "ORDER BY id"
        ).fetchall()
    return [
        DataPoint(
            timestamp=ts, kind=kind, request_id=rid, blobs=json.loads(blobs),
            doubles=json.loads(doubles), indexes=json.loads(indexes),
        )
        for ts, kind, rid, blobs, doubles, indexes in rows
    ]


def read_jsonl_points(path: str | Path) -> list[DataPoint]:
    """All points of a JSONL sink file, oldest first (blank lines skipped)."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# --------------------------------------------------------------------------------------------
# the plugin
