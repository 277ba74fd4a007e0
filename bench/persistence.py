"""The SQLite store: turn throughput on a file vs ``:memory:``, and reloading long histories.

1. Turns/s: sequential scripted tool-calling turns (the model calls a tool, then answers),
   ``--turns-per-session`` turns per session, on a SQLite file (WAL, synchronous=NORMAL) and on
   ``":memory:"``, with the share of the time spent in the store's write methods.
2. History reload: a session with M stored messages (M = 1k, 10k; alternating user messages
   and assistant messages with a step, a tool part and text) is reloaded by a new process-like
   reader: a new ``SQLiteStore(path)`` + ``list_messages``; a new ``Think(store=path)`` +
   ``session.messages()``; and ``store.history()`` (what every turn reads to build the model
   messages).

    python bench/persistence.py [--turns 1000] [--sizes 1000,10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import tempfile
import time
from typing import Any

from _common import machine, median, table
from concurrency import BenchModel, TimedStore, script, stock_level

from think_core import Think
from think_core.store import SQLiteStore
from think_core.types import UIMessage


async def turn_throughput(path: str, turns: int, per_session: int) -> dict[str, float]:
    store = TimedStore(path)
    agent = Think(BenchModel([script], repeat=True), tools=[stock_level], store=store, load_entrypoints=False)
    try:
        await agent.session("warm-up").chat("hi")
        store.seconds = {"write": 0.0, "read": 0.0}
        gc.collect()
        started = time.perf_counter()
        for i in range(turns):
            result = await agent.session(f"s{i // per_session}").chat(f"How many A-1 are left? ({i})")
            assert result.status == "completed", result.error
        wall = time.perf_counter() - started
    finally:
        await agent.aclose()
    return {"turns_per_s": turns / wall, "ms_per_turn": wall / turns * 1000,
            "write_share": store.seconds["write"] / wall, "read_share": store.seconds["read"] / wall}


def conversation(m: int) -> list[UIMessage]:
    out = []
    for i in range(m):
        if i % 2 == 0:
            out.append(UIMessage(id=f"u{i}", role="user", parts=[{"type": "text", "text": f"Question {i}: how many A-1 are left?"}]))
        else:
            out.append(UIMessage(id=f"a{i}", role="assistant", parts=[
                {"type": "step-start"},
                {"type": "tool-stock_level", "toolCallId": f"call_{i}", "state": "output-available",
                 "input": {"sku": "A-1"}, "output": {"sku": "A-1", "level": 42}},
                {"type": "step-start"},
                {"type": "text", "text": "The stock level is 42. Anything else?"},
            ]))
    return out


async def reload_times(path: str, m: int, repeat: int) -> dict[str, list[float]]:
    with SQLiteStore(path) as store:
        messages = conversation(m)
        for start in range(0, m, 1000):
            store.append_messages("long", messages[start:start + 1000])
    times: dict[str, list[float]] = {"store": [], "think": [], "history": []}
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        with SQLiteStore(path) as store:
            loaded = store.list_messages("long")
        times["store"].append(time.perf_counter() - started)
        assert len(loaded) == m and loaded[-1].parts[-1]["text"].startswith("The stock level")

        gc.collect()
        started = time.perf_counter()
        agent = Think(store=path, load_entrypoints=False)
        try:
            loaded = await agent.session("long").messages()
            times["think"].append(time.perf_counter() - started)
            assert len(loaded) == m
            started = time.perf_counter()
            history = agent.store.history("long")
            times["history"].append(time.perf_counter() - started)
            assert len(history) == m
        finally:
            await agent.aclose()
    return times


async def measure(turns: int, per_session: int, sizes: list[int], repeat: int) -> tuple[list[list[Any]], list[list[Any]]]:
    throughput_rows, reload_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for label, path in (("file (WAL)", os.path.join(tmp, "turns.db")), (":memory:", ":memory:")):
            r = await turn_throughput(path, turns, per_session)
            throughput_rows.append([label, turns, r["turns_per_s"], r["ms_per_turn"],
                                    f"{r['write_share'] * 100:.1f}%", f"{r['read_share'] * 100:.1f}%"])
        for m in sizes:
            t = await reload_times(os.path.join(tmp, f"history-{m}.db"), m, repeat)
            for what, label in (("store", "new SQLiteStore + list_messages"),
                                ("think", "new Think + session.messages()"),
                                ("history", "store.history() (per turn)")):
                reload_rows.append([f"{m:,}", label, min(t[what]) * 1000, median(t[what]) * 1000,
                                    median(t[what]) / m * 1e6])
    return throughput_rows, reload_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--turns-per-session", type=int, default=10)
    parser.add_argument("--sizes", default="1000,10000", help="history lengths to reload")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    started = time.perf_counter()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    throughput, reload = asyncio.run(measure(args.turns, args.turns_per_session, sizes, args.repeat))
    print(f"persistence — {machine()}")
    print(f"Turns ({args.turns_per_session} per session, sequential, scripted tool call + text):")
    print(table(["store", "turns", "turns/s", "ms/turn", "SQLite write time", "SQLite read time"], throughput))
    print("History reload:")
    print(table(["messages", "how", "min ms", "median ms", "µs/message"], reload))
    print(f"(total {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
