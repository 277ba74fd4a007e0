"""Recovery time after SIGKILL, with another process holding the session open the whole time.

Each round uses a fresh SQLite file. This process opens the session first (an agent with a
scripted model) and keeps it open; a worker process (``python bench/recovery.py worker ...``)
then accepts a durable submission for the session and starts its turn, which streams slowly;
once it streams, the worker is SIGKILLed. Nobody opens the session again: the process that has
it open notices the orphan and answers it. Recovery time runs from the kill until the
submission is completed (the recovered turn itself is a one-step scripted answer).

With ``--pg URL`` the same rounds run on PostgreSQL too (a fresh schema each round).

Two kinds of owner: ``same-host`` (the worker records this machine: its death is seen at once,
whatever the lease) and ``foreign`` (the worker records another host name, so only the lease
can tell: recovery waits for it).

And the same two with *nobody* holding the session open (``open nowhere``): this process has
only recovered (``agent.recover()``, as ``think serve`` does at start-up, before the worker
accepted anything) and never opens the session; its sweep of the whole store finds the orphan
and takes the session over (:mod:`think_core.durable.takeover`). The time is read from the store.

    python bench/recovery.py [--rounds 10] [--lease 3] [--pg postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from think_core import Think, hookimpl  # noqa: E402
from think_core.models.scripted import ScriptedModel, Step  # noqa: E402
from think_core.store import SQLiteStore, Store, Submission  # noqa: E402

SESSION = "s"
QUESTION_ID = "q1"
SLOW_ANSWER = " ".join(f"word{i}" for i in range(400))  # 20 s at 50 ms a word: killed long before
RECOVERED_ANSWER = "Answered by the process that had the session open."


class AnnounceStreaming:
    """Prints ``streaming`` once the turn's first text arrives (the moment to kill it)."""

    def __init__(self) -> None:
        self.said = False

    @hookimpl
    def on_chunk(self, ctx: Any) -> None:
        if not self.said and ctx.chunk.type == "text-delta":
            self.said = True
            print("streaming", flush=True)


def open_db(db: str, host: str | None = None) -> Store:
    """``db`` is a SQLite path, or ``URL#schema`` for PostgreSQL."""
    if db.startswith("postgresql://"):
        from think_core.store.postgres import PostgresStore

        url, _, schema = db.partition("#")
        return PostgresStore(url, schema=schema or None, host=host)
    return SQLiteStore(db, host=host)


async def _work(db: str, lease: float, host: str | None) -> None:
    agent = Think(
        ScriptedModel([Step(text=SLOW_ANSWER)], delay=0.05), store=open_db(db, host),
        plugins=[AnnounceStreaming()], load_entrypoints=False, submission_lease=lease,
    )
    session = agent.session(SESSION)
    accepted = await session.submit_messages(
        {"id": QUESTION_ID, "role": "user", "parts": [{"type": "text", "text": "question"}]}, idempotency_key=QUESTION_ID
    )
    await session.wait_for_submission(accepted.submission_id)


def start_worker(db: str, lease: float, host: str | None = None) -> subprocess.Popen[str]:
    """A worker process that accepts the question and streams its answer until killed."""
    command = [sys.executable, __file__, "worker", db, "--lease", str(lease)] + (["--host", host] if host else [])
    env = {**os.environ, "THINK_PLUGINS": ""}
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)


def holder(db: str, lease: float) -> Think:
    """The agent of the process that keeps the session open."""
    return Think(ScriptedModel([Step(text=RECOVERED_ANSWER)]), store=open_db(db), load_entrypoints=False, submission_lease=lease)


@dataclass
class Recovery:
    seconds: float  # from the kill until the submission completed
    before_kill: Submission  # the row as the dead worker left it (owner, lease expiry)
    after: Submission
    killed_at: float


async def kill_and_recover(
    db: str, lease: float, host: str | None, deadline: float = 60.0, *, open_here: bool = True
) -> tuple[Think, Recovery]:
    """One round: the session held open here (or, ``open_here=False``, only recovered: open
    nowhere), the worker killed mid-turn, the wait for the answer. Returns the holding agent
    (still running, for the caller to inspect and close)."""
    agent = holder(db, lease)
    if open_here:
        await agent.session(SESSION).open()
    else:
        assert await agent.recover() == []  # nothing to resume yet: from now on it sweeps the store
    worker = start_worker(db, lease, host)
    try:
        assert worker.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(worker.stdout.readline), deadline)
        assert line.strip() == "streaming", f"the worker stopped before streaming: {line!r}"
        [before] = await asyncio.to_thread(agent.store.list_submissions, SESSION, status="running")
        worker.send_signal(signal.SIGKILL)
        killed_at = time.time()
        await asyncio.to_thread(worker.wait)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()
    done = await asyncio.wait_for(finished(agent.store, before.submission_id), deadline)
    await agent.session(SESSION).submissions_drained()  # the turn's epilogue too, before the caller closes the agent
    return agent, Recovery(done.completed_at - killed_at if done.completed_at else float("nan"), before, done, killed_at)


async def finished(store: Store, submission_id: str) -> Submission:
    """The submission once final, read from the store (reading opens no session)."""
    while True:
        row = await asyncio.to_thread(store.get_submission, SESSION, submission_id)
        if row is not None and row.status not in ("pending", "running"):
            return row
        await asyncio.sleep(0.01)


#: The rounds' kinds: (name, the host the worker records, whether this process has the session open).
KINDS = (
    ("same host", None, True),
    ("foreign", "another-machine", True),
    ("same host, open nowhere", None, False),
    ("foreign, open nowhere", "another-machine", False),
)


async def measure(rounds: int, lease: float, pg: str | None) -> dict[tuple[str, str], list[float]]:
    figures: dict[tuple[str, str], list[float]] = {}
    for store in ("SQLite", "PostgreSQL") if pg else ("SQLite",):
        for k, (kind, host, open_here) in enumerate(KINDS):
            for i in range(rounds):
                with tempfile.TemporaryDirectory(prefix="think-recovery-") as workdir:
                    db = os.path.join(workdir, "think.db") if store == "SQLite" else f"{pg}#recovery_{os.getpid()}_{i}_{k}"
                    agent, recovery = await kill_and_recover(db, lease, host, open_here=open_here)
                    await agent.aclose()
                figures.setdefault((store, kind), []).append(recovery.seconds)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    worker = sub.add_parser("worker")
    worker.add_argument("db")
    worker.add_argument("--lease", type=float, default=3.0)
    worker.add_argument("--host", default=None)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--pg", default=None, help="also measure on this PostgreSQL server (URL)")
    args = parser.parse_args()
    if args.command == "worker":
        asyncio.run(_work(args.db, args.lease, args.host))
        return
    from _common import machine, percentile, table

    figures = asyncio.run(measure(args.rounds, args.lease, args.pg))
    print(machine())
    print(f"\nrounds={args.rounds} per owner kind, lease={args.lease:g}s\n")
    rows = [[store, kind, len(v), f"{percentile(v, 0.5):.2f}", f"{max(v):.2f}"] for (store, kind), v in figures.items()]
    print(table(["store", "owner", "rounds", "p50 s", "max s"], rows))


if __name__ == "__main__":
    main()
