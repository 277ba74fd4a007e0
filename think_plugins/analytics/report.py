"""Reports of the analytics plugin: ``think analytics report [--db PATH | --jsonl PATH] [--json] [--plain]``.

Reads the points written by the ``analytics`` plugin's SQLite sink (default
``analytics.db`` in think's data directory) or JSONL sink and prints: calls per tool with outcomes, error rate and
p50/p95 duration; turns by status with p50/p95 latency and mean tokens per turn; the cache hit
rate. Percentiles use the nearest-rank method. Durations are over real executions (executed and
failed calls): blocked and substituted calls take no time and would hide the tool's latency.
Cache hits are substituted outcomes; the hit rate is hits over calls that were not blocked.

The plugin adds the command to ``think`` through the ``register_commands`` hook
(:func:`register`).
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .settings import default_db_path
from .sinks import read_jsonl_points, read_sqlite_points

if TYPE_CHECKING:  # rich is the cli extra's; the report falls back to plain text without it
    from rich.table import Table

__all__ = ["percentile", "print_summary", "register", "run", "summarize"]

OUTCOMES = ("executed", "blocked", "substituted", "failed")
USAGE = "usage: think analytics report [--db PATH | --jsonl PATH] [--json] [--plain]"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``think analytics report`` to the command line's sub-parsers."""
    parser = subparsers.add_parser(
        "analytics",
        help=(__doc__ or "").strip().splitlines()[0],
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=run)
    sub = parser.add_subparsers(dest="analytics_command", metavar="ACTION")
    report = sub.add_parser("report", help="summarise recorded data points")
    source = report.add_mutually_exclusive_group()
    source.add_argument("--db", help="SQLite file of the sqlite sink (default: analytics.db in think's data directory)")
    source.add_argument("--jsonl", help="file of the jsonl sink")
    report.add_argument("--json", action="store_true", help="print the summary as JSON")
    report.add_argument("--plain", action="store_true", help="plain text tables (no colours)")


def percentile(values: Iterable[float], pct: float) -> float | None:
    """Nearest-rank percentile; ``None`` for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


def summarize(points: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The report as a JSON-able dict (the ``--json`` output)."""
    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    durations: dict[str, list[float]] = defaultdict(list)
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    turn_tokens: list[tuple[float, float, float]] = []
    for point in points:
        kind, blobs, doubles = point["kind"], point["blobs"], point["doubles"]
        if kind == "tool_call":
            tool, outcome = blobs[0], blobs[1]
            outcomes[tool][outcome] += 1
            if outcome in ("executed", "failed"):
                durations[tool].append(doubles[1])
        elif kind == "turn":
            statuses[blobs[0]] += 1
            if doubles[0] >= 0:  # -1: latency unknown
                latencies.append(doubles[0])
            turn_tokens.append((doubles[1], doubles[2], doubles[3]))
    tools = []
    for tool in sorted(outcomes):
        counts = outcomes[tool]
        calls = sum(counts.values())
        tools.append(
            {
                "tool": tool,
                "calls": calls,
                **{outcome: counts.get(outcome, 0) for outcome in OUTCOMES},
                "error_rate": counts.get("failed", 0) / calls,
                "p50_ms": percentile(durations[tool], 50),
                "p95_ms": percentile(durations[tool], 95),
            }
        )
    total: Counter[str] = Counter()
    for counts in outcomes.values():
        total.update(counts)
    lookups = sum(total.values()) - total.get("blocked", 0)
    n_turns = len(turn_tokens)
    return {
        "tools": tools,
        "turns": {
            "total": n_turns,
            "by_status": dict(sorted(statuses.items())),
            "latency_p50_ms": percentile(latencies, 50),
            "latency_p95_ms": percentile(latencies, 95),
            "tokens_per_turn": {
                name: (sum(t[i] for t in turn_tokens) / n_turns if n_turns else None)
                for i, name in enumerate(("input", "output", "total"))
            },
        },
        "cache": {
            "hits": total.get("substituted", 0),
            "lookups": lookups,
            "hit_rate": total.get("substituted", 0) / lookups if lookups else None,
        },
    }


def _fmt(value: Any, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}{suffix}" if suffix != "%" else f"{value * 100:.1f}%"
    return f"{value}{suffix}"


def print_summary(summary: dict[str, Any], *, plain: bool = False) -> None:
    """Print a :func:`summarize` result as tables (rich when available and not ``plain``)."""
    turns, cache = summary["turns"], summary["cache"]
    tool_rows = [
        [row["tool"], str(row["calls"]), *(str(row[o]) for o in OUTCOMES),
         _fmt(row["error_rate"], "%"), _fmt(row["p50_ms"]), _fmt(row["p95_ms"])]
        for row in summary["tools"]
    ]
    tool_head = ["tool", "calls", *OUTCOMES, "error rate", "p50 ms", "p95 ms"]
    tokens = turns["tokens_per_turn"]
    facts = [
        ["turns", str(turns["total"])],
        *([f"turns {status}", str(n)] for status, n in turns["by_status"].items()),
        ["turn latency p50 / p95 ms", f"{_fmt(turns['latency_p50_ms'])} / {_fmt(turns['latency_p95_ms'])}"],
        ["tokens per turn (in / out / total)",
         f"{_fmt(tokens['input'])} / {_fmt(tokens['output'])} / {_fmt(tokens['total'])}"],
        ["cache hits / lookups", f"{cache['hits']} / {cache['lookups']}"],
        ["cache hit rate", _fmt(cache["hit_rate"], "%")],
    ]
    try:
        if plain:
            raise ImportError("plain output asked for")
        from rich.console import Console
    except ImportError:
        print("\t".join(tool_head))
        for row in tool_rows:
            print("\t".join(row))
        for name, value in facts:
            print(f"{name}: {value}")
        return
    console = Console()
    # Two tool tables, not one nine-column table: at 80 columns the single one left each column
    # a few characters and rich broke headers and numbers mid-word ("subs/titu/ted", "100./0%").
    # Numbers never wrap; only a tool name longer than its column folds.
    outcomes = _table("tool calls", tool_head[:2 + len(OUTCOMES)])
    quality = _table("tool errors and durations", ["tool", *tool_head[2 + len(OUTCOMES):]])
    for row in tool_rows:
        outcomes.add_row(*row[:2 + len(OUTCOMES)])
        quality.add_row(row[0], *row[2 + len(OUTCOMES):])
    if tool_rows:
        console.print(outcomes)
        console.print(quality)
    overview = _table("turns and cache", ["metric", "value"], show_header=False)
    for name, value in facts:
        overview.add_row(name, value)
    console.print(overview)


def _table(title: str, head: list[str], *, show_header: bool = True) -> Table:
    """A rich table without side borders: the first column (a name) folds when it must, the
    others (numbers) never wrap."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, show_header=show_header)
    for index, name in enumerate(head):
        if index == 0:
            table.add_column(name, overflow="fold")
        else:
            table.add_column(name, justify="right", no_wrap=True)
    return table


def run(args: argparse.Namespace) -> int:
    """``think analytics report``: print the summary of a sink's file; 1 when it cannot be read."""
    if getattr(args, "analytics_command", None) != "report":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if args.jsonl:
            points = read_jsonl_points(args.jsonl)
        else:
            path = args.db or str(default_db_path())
            if not Path(path).is_file():
                print(f"think analytics: no analytics database at {path}", file=sys.stderr)
                return 1
            points = read_sqlite_points(path)
    except (OSError, sqlite3.Error, ValueError) as exc:
        print(f"think analytics: cannot read data points: {exc}", file=sys.stderr)
        return 1
    summary = summarize(points)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_summary(summary, plain=args.plain)
    return 0
