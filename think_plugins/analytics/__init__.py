"""Record what agents do: tool calls, token usage, turn outcomes; report on it.

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
    ``sqlite`` (default, ``path`` or ``analytics.db`` in think's data directory,
    :func:`think_core.data_dir`) and ``jsonl`` (``path`` or ``analytics.jsonl`` there) are written after each turn by a background task (in a worker
    thread), which no turn waits for. ``http`` (``url``) is written by a background task: points are
    POSTed in batches of ``batch_size`` as ``{"points": [...]}``, retried with exponential
    backoff on connection errors, 408, 425, 429 and 5xx, and dropped with a logged warning once
    the retries are spent. Points wait in a queue bounded by ``max_queue``; when it is full the
    oldest are dropped (logged). ``await plugin.drain()`` delivers what is queued;
    ``await agent.aclose()`` (which calls ``plugin.aclose()``) does so before the loop ends.

Report
    ``think analytics report [--db PATH | --jsonl PATH] [--json] [--plain]`` — a command this
    plugin adds to the ``think`` command line through the ``register_commands`` hook — summarises
    what a SQLite or JSONL sink recorded (:mod:`think_plugins.analytics.report`).

Modules: :mod:`~think_plugins.analytics.plugin` (the hooks and the queue),
:mod:`~think_plugins.analytics.sinks` (sinks and file readers),
:mod:`~think_plugins.analytics.settings`, :mod:`~think_plugins.analytics.report`.
"""

from __future__ import annotations

from .plugin import Analytics
from .settings import AnalyticsSettings, default_db_path, default_jsonl_path
from .sinks import (
    DataPoint,
    HTTPSink,
    JSONLSink,
    Sink,
    SinkError,
    SQLiteSink,
    build_sink,
    read_jsonl_points,
    read_sqlite_points,
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
    "build_sink",
    "default_db_path",
    "default_jsonl_path",
    "read_jsonl_points",
    "read_sqlite_points",
]
