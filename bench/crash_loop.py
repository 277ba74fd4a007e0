"""Crash loop: SIGKILL a real worker at every marked point of a durable turn, restart, audit.

Each round uses a fresh SQLite file. A worker (``bench/crash_worker.py``) submits MESSAGES
messages of one session with durable ``submit_messages`` and drains them (a scripted model, an
idempotent ``lookup`` and a non-idempotent ``record`` tool, one per step, then the answer); it
kills itself with SIGKILL at the round's point — while streaming, tool started (inside the tool,
after its side effect), tool finished, step finished, answer stored (right after the commit),
inside ``on_chat_response``, after a submission finished — at a random occurrence. A second
worker then opens the session, submits the same messages (idempotency keys: nothing is
accepted twice) and drains. The audit counts, per round: messages lost (not answered),
answered twice, answered wrongly (the text is not the answer to that message and its stored
tool results), ``record`` executions repeated, and histories that are not well-formed. The
rounds take turns between two ways of sending the messages: durable ``submit_messages``, and
the server's chat path (``Session.stream_transcript``, each chat keyed by its message id).

Recovery time: from starting the second worker until the first submission that was unfinished
at the kill is answered (it includes the worker's start-up; the dead worker was on this host,
so its lease is not waited for).

    python bench/crash_loop.py [--rounds 100] [--messages 3] [--lease 2] [--seed 20]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import machine, percentile, table
from crash_worker import POINTS, SQLiteStore, audit

WORKER = Path(__file__).resolve().parent / "crash_worker.py"
SESSION = "s"
# How often each point happens in one turn of the worker's script (streamed text pieces:
# about 5 + 3 + 15; two tools; three steps; one answer).
PER_TURN = {"streaming": 20, "tool_started": 2, "tool_finished": 2, "step_finished": 3,
            "answer_stored": 1, "on_chat_response": 1, "after_finish": 1}
# How the worker sends its messages, in turns: durable submit_messages, or as the server's chats.
VIAS = ("submit", "chat")
COUNTS = ("lost", "answered_twice", "wrong", "reexecuted", "malformed")


def _worker(db: str, messages: int, lease: float, env: dict[str, str], via: str = "submit") -> int:
    full = {k: v for k, v in os.environ.items() if not k.startswith("THINK_CRASH_")} | env
    done = subprocess.run([sys.executable, str(WORKER), db, SESSION, str(messages), "--lease", str(lease), "--via", via],
                          env=full, capture_output=True, text=True, timeout=600)
    if done.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"worker failed ({done.returncode}):\n{done.stderr}")
    return done.returncode


def _unfinished(db: str) -> list[str]:
    with SQLiteStore(db) as store:
        return [s.submission_id for s in store.list_submissions(SESSION, status=("pending", "running"))]


def _completed_at(db: str, submission_id: str) -> float | None:
    with SQLiteStore(db) as store:
        row = store.get_submission(SESSION, submission_id)
    return row.completed_at if row is not None else None


def one_round(point: str, at: int, messages: int, lease: float, workdir: str, via: str = "submit") -> dict[str, Any]:
    db = os.path.join(workdir, "think.db")
    killed = _worker(db, messages, lease, {"THINK_CRASH_POINT": point, "THINK_CRASH_AT": str(at)}, via) != 0
    waiting = _unfinished(db) if os.path.exists(db) else []
    restarted = time.time()
    _worker(db, messages, lease, {}, via)
    report = audit(db, SESSION, messages)
    report["killed"] = killed
    first = _completed_at(db, waiting[0]) if waiting else None
    report["recovery"] = first - restarted if first is not None else None
    return report


def run(rounds: int, messages: int, lease: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    kills: Counter[str] = Counter()
    kills_via: Counter[tuple[str, str]] = Counter()
    totals: Counter[str] = Counter()
    recoveries: list[float] = []
    problems: list[str] = []
    for index in range(rounds):
        point = POINTS[index % len(POINTS)]
        via = VIAS[index // len(POINTS) % len(VIAS)]
        at = rng.randint(1, PER_TURN[point] * messages)
        with tempfile.TemporaryDirectory(prefix="think-crash-") as workdir:
            report = one_round(point, at, messages, lease, workdir, via)
        kills[point] += report["killed"]
        kills_via[point, via] += report["killed"]
        for key in (*COUNTS, "interrupted"):
            totals[key] += report[key]
        totals["lookup_reruns"] += sum(n - 1 for line, n in report["effects"].items() if line.startswith("lookup\t"))
        if report["recovery"] is not None:
            recoveries.append(report["recovery"])
        problems.extend(f"round {index} ({via} {point}#{at}): {p}" for p in report["problems"])
    return {"rounds": rounds, "kills": kills, "kills_via": kills_via, "totals": totals, "recoveries": recoveries, "problems": problems}


def print_report(result: dict[str, Any], messages: int, lease: float) -> None:
    kills, totals, recoveries = result["kills"], result["totals"], result["recoveries"]
    print(machine())
    print(f"\nrounds={result['rounds']} messages/round={messages} lease={lease:g}s\n")
    by_via = result["kills_via"]
    rows = [[p, *(by_via[p, v] for v in VIAS), kills[p]] for p in POINTS]
    rows.append(["total", *(sum(by_via[p, v] for p in POINTS) for v in VIAS), sum(kills.values())])
    print(table(["point", *(f"kills ({v})" for v in VIAS), "kills"], rows))
    print()
    rows = [[k, totals[k]] for k in COUNTS]
    rows += [["record calls reported interrupted", totals["interrupted"]],
             ["lookup (idempotent) re-runs", totals["lookup_reruns"]]]
    print(table(["outcome", "count"], rows))
    if recoveries:
        print(f"\nrecovery time: p50 {percentile(recoveries, 0.5):.2f} s, max {max(recoveries):.2f} s "
              f"({len(recoveries)} rounds with an unfinished submission at the kill)")
    for problem in result["problems"][:20]:
        print("PROBLEM", problem)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--messages", type=int, default=3)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=20)
    args = parser.parse_args()
    result = run(args.rounds, args.messages, args.lease, args.seed)
    print_report(result, args.messages, args.lease)
    if result["problems"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
