"""Many sessions at once: throughput, latency, memory and SQLite's share of the time.

S concurrent sessions (S = 1, 10, 100, 1000) each run a scripted tool-calling turn — the model
(``ScriptedModel``) asks for a tool, the tool runs, the model answers with text — against a
SQLite *file* store, all on one event loop. S workers run side by side; each opens a session,
runs ``--turns-per-session`` turns (default 1) in it, then moves on to a fresh session, until
the level has run at least ``--turns`` turns (so the history, and the per-turn work, is the
same at every level). Each level runs in a fresh subprocess, so memory numbers are not skewed
by an earlier level. Printed per level:

  turns/s        completed turns / wall time of the whole level
  p50 / p99 ms   latency of one ``session.chat()`` call (queueing on the event loop included)
  RSS/session    (RSS after the turns − RSS before the agent was built) / sessions opened
                 (sessions stay cached in the agent, so this is what one costs to keep)
  SQLite write % time spent inside the store's write methods / wall time (the store is wrapped
                 by a subclass that times every call; reads are shown separately)

    python bench/concurrency.py [--levels 1,10,100,1000] [--turns 300]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import machine, percentile, rss_mib, table

from think_core import Think, tool
from think_core.events import Usage
from think_core.models.base import ModelRequest, ToolMessage
from think_core.models.scripted import ScriptedModel, ScriptedToolCall, Step
from think_core.store import SQLiteStore

WRITE_METHODS = (
    "ensure_session", "append_messages", "upsert_message", "delete_messages", "clear_messages",
    "add_compaction", "create_submission", "claim_next_submission", "mark_submission_applied",
    "apply_submission_messages", "finish_submission", "retake_stale_submissions", "requeue_submission",
    "heartbeat_submission", "set_state",
)
READ_METHODS = (
    "list_sessions", "list_messages", "get_message", "list_compactions", "history", "get_submission",
    "list_submissions", "pending_session_ids", "get_state",
)


class TimedStore(SQLiteStore):
    """The real SQLite store; every public read/write method is timed (not modified)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seconds = {"write": 0.0, "read": 0.0}
        self.calls = {"write": 0, "read": 0}
        for kind, names in (("write", WRITE_METHODS), ("read", READ_METHODS)):
            for name in names:
                setattr(self, name, self._timed(kind, getattr(self, name)))

    def _timed(self, kind: str, method: Any) -> Any:
        @functools.wraps(method)  # (the engine tells store calls apart by name)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[kind] += time.perf_counter() - started
                self.calls[kind] += 1

        return timed


def script(request: ModelRequest) -> Step:
    """First step of a turn: call the tool; after its result: answer with text."""
    if request.messages and isinstance(request.messages[-1], ToolMessage):
        result = request.messages[-1].output
        return Step(text=f"The stock level is {result['level']}. Anything else?", usage=Usage(input_tokens=60, output_tokens=12, total_tokens=72))
    return Step(tool_calls=[ScriptedToolCall("stock_level", {"sku": "A-1"})],
                usage=Usage(input_tokens=50, output_tokens=8, total_tokens=58))


@tool(read_only=True)
def stock_level(sku: str) -> dict:
    """The stock level of a product."""
    return {"sku": sku, "level": 42}


class BenchModel(ScriptedModel):
    """``ScriptedModel`` keeps every request it was sent (for test assertions); a long run must
    not, or memory grows with the square of the history. Only the count is kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests = _CountOnly()


class _CountOnly(list):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def append(self, item: Any) -> None:
        self.count += 1

    def __len__(self) -> int:
        return self.count


async def run_level(concurrency: int, rounds: int, turns_per_session: int, path: str) -> dict[str, Any]:
    gc.collect()
    rss_before = rss_mib()
    store = TimedStore(path)
    agent = Think(BenchModel([script], repeat=True), tools=[stock_level], store=store, load_entrypoints=False)
    latencies: list[float] = []
    statuses: dict[str, int] = {}

    async def worker(index: int) -> None:
        """One session at a time: ``turns_per_session`` turns, then the next session."""
        for round_ in range(rounds):
            session = agent.session(f"s{index}-{round_}")
            for turn in range(turns_per_session):
                started = time.perf_counter()
                result = await session.chat(f"How many A-1 are left? ({turn})")
                latencies.append(time.perf_counter() - started)
                statuses[result.status] = statuses.get(result.status, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    wall = time.perf_counter() - started
    rss_after = rss_mib()
    opened = concurrency * rounds
    # Every turn stored its user message and one assistant message with a tool part and text.
    sample = store.list_messages("s0-0")
    assert len(sample) == 2 * turns_per_session and sample[-1].parts[-1]["text"].startswith("The stock level is 42")
    await agent.aclose()
    turns = opened * turns_per_session
    assert statuses == {"completed": turns}, statuses
    return {
        "sessions": concurrency,
        "opened": opened,
        "turns": turns,
        "wall": wall,
        "turns_per_s": turns / wall,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "rss_per_session_kib": (rss_after - rss_before) * 1024 / opened,
        "write_share": store.seconds["write"] / wall,
        "read_share": store.seconds["read"] / wall,
        "writes_per_turn": store.calls["write"] / turns,
        "write_us": store.seconds["write"] / max(store.calls["write"], 1) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,10,100,1000", help="concurrent sessions per level")
    parser.add_argument("--turns", type=int, default=2000, help="minimum turns per level")
    parser.add_argument("--turns-per-session", type=int, default=1, help="turns each session runs")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # run one level, print JSON
    args = parser.parse_args()
    if args.one is not None:
        rounds = max(1, -(-args.turns // (args.one * args.turns_per_session)))
        with tempfile.TemporaryDirectory() as tmp:
            row = asyncio.run(run_level(args.one, rounds, args.turns_per_session, os.path.join(tmp, "think.db")))
        print(json.dumps(row))
        return
    started = time.perf_counter()
    rows = []
    for level in (int(x) for x in args.levels.split(",") if x.strip()):
        out = subprocess.run([sys.executable, __file__, "--one", str(level), "--turns", str(args.turns),
                              "--turns-per-session", str(args.turns_per_session)],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        rows.append([r["sessions"], r["opened"], r["turns"], r["turns_per_s"], r["p50_ms"], r["p99_ms"],
                     r["rss_per_session_kib"], f"{r['write_share'] * 100:.1f}%", f"{r['read_share'] * 100:.1f}%",
                     r["writes_per_turn"], r["write_us"]])
    print(f"concurrency — {machine()}")
    print(table(["concurrent sessions", "sessions opened", "turns", "turns/s", "p50 ms", "p99 ms", "RSS/session KiB", "SQLite write time",
                 "SQLite read time", "writes/turn", "µs/write"], rows))
    print(f"(scripted tool-calling turns, 2 model steps each, SQLite file store (WAL); "
          f"total {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
