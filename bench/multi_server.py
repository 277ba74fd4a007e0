"""Turns per second with several ``think serve`` processes on one PostgreSQL database, against
one server on SQLite — all on this machine.

A model server process answers every request at once (one write): the first step of a turn calls
a tool, the second answers. Each configuration starts its servers on a fresh database, then
``--sessions`` clients (one session each) send ``--messages`` chats one after the other
(``POST /api/chat``, every chat a durable submission), spread round-robin over the servers.
Turns per second = chats answered / wall time from the first request to the last answer.

    python bench/multi_server.py --pg postgresql://postgres@127.0.0.1:5432/postgres \
        [--sessions 32] [--messages 10] [--servers 1,2,4]

Without ``--pg`` (or ``$THINK_TEST_POSTGRES_URL``) only SQLite is measured.

First it counts what one such chat costs the store, on each database: the app served in this
process on a store wrapped in a counting proxy (``bench/_counting.py``), one chat after a
first chat of its session (which also opens the session), until its submission is drained. *Store calls* are the ``Store`` methods the chat
called (the orphan watch's sweep left out), *transactions* those of them that reach the database
(``submission_owner`` and ``session_lock`` do not), and on PostgreSQL *statements* every statement
sent to the server (``BEGIN`` … ``COMMIT`` each a round trip, a session lock's included).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import machine, table  # noqa: E402
from bench._counting import CountingStore, count_pg_statements  # noqa: E402
from bench.stream_overhead import ServerProcess, serve  # noqa: E402
from think_core.server.testing import wait_until_healthy  # noqa: E402

TOOLS_SPEC = "bench._tools:TOOLS"


def _sse(*payloads: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads) + b"data: [DONE]\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def model_route(path: str, body: bytes, cache: dict[Any, bytes]) -> bytes:
    """Step one calls ``note``; step two (after the tool result) answers."""
    messages = json.loads(body)["messages"]
    if messages[-1]["role"] == "tool":
        words = [{"content": w} for w in ("Noted", " and", " answered", ".")]
        return _sse(_chunk({"role": "assistant", "content": ""}), *(_chunk(w) for w in words), _chunk({}, "stop"))
    call = {"index": 0, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": "note", "arguments": json.dumps({"text": "x"})}}
    return _sse(_chunk({"role": "assistant", "tool_calls": [call]}), _chunk({}, "tool_calls"))


class Servers:
    """``count`` ``think serve`` processes on ``db`` (``args``: more ``think serve`` options)."""

    def __init__(self, db: str, model_url: str, count: int, args: tuple[str, ...] = ()) -> None:
        self.db, self.model_url, self.count, self.args = db, model_url, count, args
        self.procs: list[subprocess.Popen[str]] = []
        #: The servers' stderr, shown when a run fails.
        self.log = tempfile.TemporaryFile("w+")
        self.drains: list[threading.Thread] = []

    def __enter__(self) -> list[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "THINK_PLUGINS": ""}
        bases = []
        for _ in range(self.count):
            proc = subprocess.Popen(
                [sys.executable, "-m", "think_core.cli", "serve", "--model", f"openai-compatible:m@{self.model_url}/v1",
                 "--db", self.db, "--port", "0", "--no-plugins", "--no-timeline", "--tools", TOOLS_SPEC, *self.args],
                stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=ROOT,
            )
            self.procs.append(proc)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("think: serving on "), line
            # Read on what the server prints (its access log): an unread pipe fills at 64 KiB and
            # then blocks the server's event loop on its next log line.
            drain = threading.Thread(target=proc.stdout.read, daemon=True)
            drain.start()
            self.drains.append(drain)
            bases.append(line.split()[3])
        return bases

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self.log.seek(0)
            print(self.log.read()[-4000:], file=sys.stderr)
        self.log.close()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for drain in self.drains:  # each ends at its server's end of output
            drain.join()
        for proc in self.procs:
            if proc.stdout is not None:
                proc.stdout.close()


async def one_chat(client: httpx.AsyncClient, session: str, k: int = 0) -> None:
    """Message ``k`` of ``session`` (the client sends only the new message)."""
    body = {"id": session, "messages": [{"id": f"{session}-{k}", "role": "user", "parts": [{"type": "text", "text": f"m{k}"}]}],
            "trigger": "submit-message"}
    async with client.stream("POST", "/api/chat", json=body) as response:
        response.raise_for_status()
        async for _ in response.aiter_bytes():
            pass


#: Store methods that do not reach the database.
LOCAL_METHODS = {"submission_owner", "session_lock"}


async def count_round_trips(store: Any, model_url: str, pg: bool) -> dict[str, Any]:
    """What one durable chat (a tool call, then the answer) costs the store."""
    from bench._tools import TOOLS
    from think_core import Think
    from think_core.server import create_app
    from think_core.server.testing import running_server

    counting = CountingStore(store)
    agent = Think(f"openai-compatible:m@{model_url}/v1", store=counting, tools=TOOLS, load_entrypoints=False)
    with count_pg_statements(counting) if pg else contextlib.nullcontext():
        async with agent, running_server(create_app(agent, timeline=False)) as base, httpx.AsyncClient(base_url=base) as http:
            session = f"counted-{uuid.uuid4().hex[:6]}"
            await one_chat(http, session, 0)  # the first chat also opens the session
            await agent.session(session).submissions_drained()
            counting.clear()
            counting.recording = True
            await one_chat(http, session, 1)
            await agent.session(session).submissions_drained()
            counting.recording = False
    calls, statements = counting.request_calls()
    return {
        "calls": calls, "statements": statements,
        "transactions": sum(n for method, n in calls.items() if method not in LOCAL_METHODS),
    }


def round_trip_rows(db: str, label: str, model_url: str, pg: bool) -> list[list[object]]:
    from think_core.store.aio import open_store

    store = open_store(db)
    try:
        counted = asyncio.run(count_round_trips(store, model_url, pg))
    finally:
        store.close()
    statements = counted["statements"]
    by_method = ", ".join(
        f"{m} {n}" + (f" ({statements[m]} st.)" if m in statements else "") for m, n in sorted(counted["calls"].items())
    )
    return [[label, sum(counted["calls"].values()), counted["transactions"],
             sum(counted["statements"].values()) if pg else "–", by_method]]


async def drive(bases: list[str], sessions: int, messages: int) -> float:
    """Turns per second: every session sends its chats one after the other."""
    clients = [httpx.AsyncClient(base_url=b, timeout=120) for b in bases]
    for client in clients:
        await wait_until_healthy(client, timeout=60)
    run = uuid.uuid4().hex[:6]

    async def converse(i: int) -> None:
        session = f"bench-{run}-{i}"
        transcript: list[dict[str, Any]] = []
        for k in range(messages):
            transcript.append({"id": f"{session}-{k}", "role": "user", "parts": [{"type": "text", "text": f"m{k}"}]})
            client = clients[(i + k) % len(clients)]
            body = {"id": session, "messages": transcript, "trigger": "submit-message"}
            async with client.stream("POST", "/api/chat", json=body) as response:
                response.raise_for_status()
                async for _ in response.aiter_bytes():
                    pass

    started = time.perf_counter()
    await asyncio.gather(*(converse(i) for i in range(sessions)))
    elapsed = time.perf_counter() - started
    for client in clients:
        await client.aclose()
    return sessions * messages / elapsed


def fresh_pg_database(url: str) -> tuple[str, Any]:
    import psycopg

    name = f"think_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return urlsplit(url)._replace(path=f"/{name}").geturl(), drop


def measure(label: str, db: str, model_url: str, count: int, args: argparse.Namespace) -> list[object]:
    with Servers(db, model_url, count) as bases:
        # One short warm-up round (imports, connections), then the measured one.
        asyncio.run(drive(bases, min(4, args.sessions), 1))
        rate = asyncio.run(drive(bases, args.sessions, args.messages))
    return [label, count, args.sessions * args.messages, f"{rate:.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pg", default=os.environ.get("THINK_TEST_POSTGRES_URL"), help="PostgreSQL server URL")
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--servers", default="1,2,4", help="server counts on PostgreSQL")
    parser.add_argument("--count-only", action="store_true", help="only count one chat's store round trips")
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(model_route))
        return
    print(machine())
    rows: list[list[object]] = []
    with ServerProcess(__file__) as model_url, tempfile.TemporaryDirectory() as tmp:
        trips = round_trip_rows(str(Path(tmp) / "count.db"), "SQLite", model_url, False)
        if args.pg:
            db, drop = fresh_pg_database(args.pg)
            try:
                trips += round_trip_rows(db, "PostgreSQL", model_url, True)
            finally:
                drop()
        print("One durable chat, the second of its session (accept, claim, a tool-call step, the answer step, completion):")
        print(table(["store", "store calls", "transactions", "PostgreSQL statements", "by method"], trips))
        if args.count_only:
            return
        rows.append(measure("SQLite", str(Path(tmp) / "bench.db"), model_url, 1, args))
        if args.pg:
            for count in (int(c) for c in args.servers.split(",")):
                db, drop = fresh_pg_database(args.pg)
                try:
                    rows.append(measure("PostgreSQL", db, model_url, count, args))
                finally:
                    drop()
    print(table(["store", "servers", "turns", "turns/s"], rows))


if __name__ == "__main__":
    main()
