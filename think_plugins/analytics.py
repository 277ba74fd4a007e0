"""Record what agents do: tool calls, token usage, turn outcomes.

Registered under the entry point ``analytics``. It only observes: it never changes a turn and a
failing sink never fails one (errors are caught here and logged; the engine isolates observers
as a second line of defence).

Data points have the shape of Cloudflare Analytics Engine's ``writeDataPoint`` (as in the
reference), plus ``kind``, ``timestamp`` (Unix seconds) and ``request_id``:

``tool_call``
    ``blobs [tool_name, outcome]``, ``doubles [output_size, duration_ms]``,
    ``indexes [session_id]``. ``outcome`` is ``executed``, ``blocked``, ``substituted`` (a cache
    hit, or any other substitution) or ``failed``; ``output_size`` is the length of the JSON of
    what the model received (the output, or the error text of a failed call).
``step``
    ``blobs [finish_reason, model_id]``, ``doubles [input_tokens, output_tokens, total_tokens,
    reasoning_tokens, cached_input_tokens, step_number]``.
``turn``
    ``blobs [status, error]``, ``doubles [latency_ms, input_tokens, output_tokens,
    total_tokens]``.

Turn latency
    ``before_turn`` is a firstresult hook, so a plugin that decides earlier hides it from this
    one. The latency is therefore measured from the *first* hook this plugin sees for the
    request — ``before_turn`` or ``before_step`` (both observed ``tryfirst``, returning
    ``None``), else ``after_tool_call`` / ``on_step_finish`` — to ``on_chat_response``. If
    ``on_chat_response`` is the first (the turn failed before any of those ran), the latency is
    unknown and recorded as ``-1``; reports ignore negative latencies.

Sinks (``sink`` setting)
    ``sqlite`` (default, ``path`` or ``think-analytics.db``) and ``jsonl`` (``path`` or
    ``think-analytics.jsonl``) are written after each turn by a background task (in a worker
    thread), which no turn waits for. ``http`` (``url``) is written by a background task: points are
    POSTed in batches of ``batch_size`` as ``{"points": [...]}``, retried with exponential
    backoff on connection errors, 408, 425, 429 and 5xx, and dropped with a logged warning once
    the retries are spent. Points wait in a queue bounded by ``max_queue``; when it is full the
    oldest are dropped (logged). ``await plugin.drain()`` delivers what is queued;
    ``await agent.aclose()`` (which calls ``plugin.aclose()``) does so before the loop ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections import OrderedDict, deque
from contextlib import closing
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Protocol, TypedDict

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from think_core import (
    ChatResponseResult,
    StepContext,
    StepResult,
    ToolCallResultContext,
    TurnContext,
    hookimpl,
)

__all__ = [
    "Analytics",
    "AnalyticsSettings",
    "DataPoint",
    "HTTPSink",
    "JSONLSink",
    "SQLiteSink",
    "Sink",
    "SinkError",
    "DEFAULT_DB_PATH",
    "DEFAULT_JSONL_PATH",
    "read_jsonl_points",
    "read_sqlite_points",
]

logger = logging.getLogger("think.plugins.analytics")

DEFAULT_DB_PATH = "think-analytics.db"
DEFAULT_JSONL_PATH = "think-analytics.jsonl"
_MAX_OPEN_TURNS = 1024  # per session: start times of turns that never reached on_chat_response
_RETRY_STATUSES = frozenset({408, 425, 429})


class AnalyticsSettings(BaseModel):
    """Settings of ``analytics``. The defaults write to ``think-analytics.db`` in the cwd."""

    model_config = ConfigDict(extra="forbid")

    sink: Literal["sqlite", "jsonl", "http"] = "sqlite"
    path: Optional[str] = None
    """File of the ``sqlite`` / ``jsonl`` sink."""
    url: Optional[str] = None
    """Collector URL of the ``http`` sink (required for it)."""
    headers: dict[str, str] = {}
    """Extra request headers of the ``http`` sink (an authorization token, say)."""
    batch_size: int = Field(default=100, gt=0)
    max_queue: int = Field(default=10_000, gt=0)
    max_retries: int = Field(default=3, ge=0)
    backoff_seconds: float = Field(default=0.5, ge=0)
    max_backoff_seconds: float = Field(default=10.0, ge=0)
    timeout_seconds: float = Field(default=5.0, gt=0)

    @model_validator(mode="after")
    def _http_needs_url(self) -> "AnalyticsSettings":
        if self.sink == "http" and not self.url:
            raise ValueError('sink "http" needs a "url"')
        return self


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


# --------------------------------------------------------------------------------------------
# sinks
# --------------------------------------------------------------------------------------------

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

    def __init__(self, path: str, busy_timeout_ms: int = 5000) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._schema_ready = False

    def _write(self, points: list[DataPoint]) -> None:
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

    def __init__(self, path: str) -> None:
        self.path = path

    def _write(self, points: list[DataPoint]) -> None:
        text = "".join(json.dumps(p, separators=(",", ":")) + "\n" for p in points)
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
        self._client: Optional[httpx.AsyncClient] = None
        self._client_loop: Optional[asyncio.AbstractEventLoop] = None

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
        return JSONLSink(settings.path or DEFAULT_JSONL_PATH)
    return SQLiteSink(settings.path or DEFAULT_DB_PATH)


# --------------------------------------------------------------------------------------------
# readers (for reports)
# --------------------------------------------------------------------------------------------


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
# --------------------------------------------------------------------------------------------


def _outcome(ctx: ToolCallResultContext) -> str:
    if ctx.decision == "block":
        return "blocked"
    if ctx.decision == "substitute":
        return "substituted"
    return "executed" if ctx.success else "failed"


def _json_size(value: Any) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return len(repr(value))


class Analytics:
    """Records data points and hands them to a sink (see the module docstring).

    :param settings: :class:`AnalyticsSettings` or a dict of its fields. Settings given here win:
        the instance then ignores ``Think(settings={"analytics": ...})``. Built without them (as
        the entry-point loader does), it is configured from that section.
    :param sink: a sink object to use instead of the one the settings name.
    """

    name = "analytics"
    #: read by the plugin loader: ``Think(settings={name: {...}})`` is validated with it
    settings_model: type[AnalyticsSettings] = AnalyticsSettings

    def __init__(
        self,
        settings: AnalyticsSettings | Mapping[str, Any] | None = None,
        *,
        sink: Optional[Sink] = None,
    ) -> None:
        self._custom_sink = sink
        self._queue: deque[DataPoint] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock: Optional[asyncio.Lock] = None
        self._lock_loop: Optional[asyncio.AbstractEventLoop] = None
        self._overflowing = False
        #: points dropped: queue overflow, or a sink that failed to write them
        self.dropped = 0
        #: points a sink accepted
        self.written = 0
        self.settings = (
            settings
            if isinstance(settings, AnalyticsSettings)
            else AnalyticsSettings.model_validate(settings or {})
        )

    @property
    def settings(self) -> AnalyticsSettings:
        return self._settings

    @settings.setter
    def settings(self, value: AnalyticsSettings) -> None:
        """Assigning settings (as the entry-point loader does) picks the sink they name."""
        self._settings = value
        self.sink: Sink = self._custom_sink or build_sink(value)

    # -- recording ----------------------------------------------------------------------------
    def _starts(self, session: Any) -> "OrderedDict[str, float]":
        return session.state_for(self).setdefault("starts", OrderedDict())

    def _seen(self, session: Any, request_id: str) -> None:
        """Note the first time this request shows up (the start of its latency)."""
        starts = self._starts(session)
        if request_id not in starts:
            starts[request_id] = time.perf_counter()
            while len(starts) > _MAX_OPEN_TURNS:
                starts.popitem(last=False)

    def _record(self, kind: Any, request_id: str, session_id: str, blobs: list[str], doubles: list[float]) -> None:
        point = DataPoint(
            kind=kind, timestamp=time.time(), request_id=request_id, blobs=blobs,
            doubles=[float(d) for d in doubles], indexes=[session_id],
        )
        if len(self._queue) >= self.settings.max_queue:
            self._queue.popleft()
            self.dropped += 1
            if not self._overflowing:
                self._overflowing = True
                logger.warning(
                    "analytics: queue full (%d points); dropping the oldest points",
                    self.settings.max_queue,
                )
        self._queue.append(point)
        if self.sink.background and len(self._queue) >= self.settings.batch_size:
            self._flush_in_background()

    # -- hooks --------------------------------------------------------------------------------
    @hookimpl(tryfirst=True)
    def before_turn(self, ctx: TurnContext) -> None:
        """Observe only (returns ``None``): the start of the turn's latency."""
        self._seen(ctx.session, ctx.request_id)
        return None

    @hookimpl(tryfirst=True)
    def before_step(self, ctx: StepContext) -> None:
        """Observe only: the latency start when ``before_turn`` was hidden by another plugin."""
        self._seen(ctx.session, ctx.request_id)
        return None

    @hookimpl
    def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        try:
            self._seen(ctx.session, ctx.request_id)
            shown = ctx.output if ctx.success else ctx.error
            self._record(
                "tool_call", ctx.request_id, str(ctx.session.id),
                [ctx.tool_name, _outcome(ctx)], [_json_size(shown), ctx.duration_ms],
            )
        except Exception:
            logger.exception("analytics: could not record a tool call")

    @hookimpl
    def on_step_finish(self, ctx: StepResult) -> None:
        try:
            self._seen(ctx.session, ctx.request_id)
            u = ctx.usage
            self._record(
                "step", ctx.request_id, str(ctx.session.id),
                [ctx.finish_reason or "", ctx.model_id or ""],
                [u.input_tokens, u.output_tokens, u.total_tokens, u.reasoning_tokens,
                 u.cached_input_tokens, ctx.step_number],
            )
        except Exception:
            logger.exception("analytics: could not record a step")

    @hookimpl
    async def on_chat_response(self, result: ChatResponseResult) -> None:
        try:
            started = self._starts(result.session).pop(result.request_id, None)
            latency = -1.0 if started is None else (time.perf_counter() - started) * 1000.0
            u = result.usage
            self._record(
                "turn", result.request_id, str(result.session.id),
                [result.status, (result.error or "")[:500]],
                [latency, u.input_tokens, u.output_tokens, u.total_tokens],
            )
        except Exception:
            logger.exception("analytics: could not record a turn")
        # Never on the turn's path: a slow or locked sink must not delay the caller.
        self._flush_in_background()

    # -- delivery -----------------------------------------------------------------------------
    def _flush_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    def _flush_in_background(self) -> None:
        """Start a flush task unless one is running and another is already waiting for it."""
        pending = [task for task in self._tasks if not task.done()]
        if len(pending) >= 2:
            return
        task = asyncio.get_running_loop().create_task(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def queued(self) -> int:
        """Points waiting for the sink."""
        return len(self._queue)

    async def flush(self) -> None:
        """Hand every queued point to the sink, batch by batch.

        A batch the sink fails to write is dropped with a logged warning and this pass stops;
        points queued behind it wait for the next flush (so a dead collector costs one retry
        cycle per flush, not one per batch). Never raises for a sink failure.
        """
        async with self._flush_lock():
            while self._queue:
                size = min(self.settings.batch_size, len(self._queue))
                batch = [self._queue.popleft() for _ in range(size)]
                self._overflowing = False
                try:
                    await self.sink.write(batch)
                except Exception as exc:
                    self.dropped += len(batch)
                    logger.warning(
                        "analytics: dropped %d data point(s): %s sink failed: %s",
                        len(batch), type(self.sink).__name__, f"{type(exc).__name__}: {exc}",
                    )
                    return
                self.written += len(batch)

    async def drain(self) -> None:
        """Wait for background flushes and deliver what is queued (e.g. before reading the sink)."""
        while pending := [task for task in self._tasks if not task.done()]:
            await asyncio.gather(*pending, return_exceptions=True)
        await self.flush()

    async def aclose(self) -> None:
        """Deliver what is left (once), then close the sink. ``await agent.aclose()`` calls it."""
        await self.drain()
        if self._queue:
            self.dropped += len(self._queue)
            logger.warning("analytics: dropped %d undelivered data point(s) at close", len(self._queue))
            self._queue.clear()
        await self.sink.aclose()
