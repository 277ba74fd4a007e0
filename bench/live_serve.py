"""``think serve`` relaying N live chats, and holding M idle WebSocket connections.

The upstream is ``bench/live_streams.py``'s (a process of its own: one event per write,
``--gap`` ms apart, ``--events`` per chat). One ``think serve`` process (SQLite file, no plugins)
answers N concurrent ``POST /api/chat`` requests (each a durable submission streamed back as the
AI SDK UI message stream, every event also written to the stream log that resumption reads).
Printed: the server process's CPU (``/proc/<pid>/stat``, user + system) per relayed event and per
turn, the wall time against the model's pace (events × gap), and then its RSS growth per idle
WebSocket connection (M clients connect to ``/agents/think/<id>``, receive the opening frames and
stay open).

Two configurations, each a fresh server: ``fast`` (the ``fast`` extra as installed: uvloop, think's
own HTTP transport, httptools under uvicorn) and ``plain`` (``THINK_EVENT_LOOP=asyncio
THINK_HTTP_TRANSPORT=httpx``, ``--http h11``: as without the extra). The
idle connections are measured with the ``fast`` configuration once per ``--ws-compression`` mode
(each a fresh server): ``large`` (the default), ``all`` (uvicorn's own) and ``off``.

    python bench/live_serve.py                   # N = 100, 200; M = 2,000
    python bench/live_serve.py --sizes 200 --idle 10000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from typing import Any

import httpx
from _common import machine, table
from live_streams import Upstream, raise_fd_limit

from bench.multi_server import Servers
from think_core.server.testing import wait_until_healthy

#: name → (environment, ``think serve`` options)
CONFIGS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "fast": ({}, ()),
    "plain": ({"THINK_EVENT_LOOP": "asyncio", "THINK_HTTP_TRANSPORT": "httpx"}, ("--http", "h11")),
}
WS_COMPRESSION = ("all", "large", "off")


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU of process ``pid`` (all its threads), or of its thread ``tid``."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def chat(client: httpx.AsyncClient, session: str) -> int:
    """One chat over HTTP; the number of text-delta events the UI stream carried."""
    body = {"id": session, "messages": [{"id": f"{session}-0", "role": "user", "parts": [{"type": "text", "text": "go"}]}],
            "trigger": "submit-message"}
    deltas = 0
    async with client.stream("POST", "/api/chat", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith('data: {"type":"text-delta"'):
                deltas += 1
    return deltas


async def relay(base: str, pid: int, n: int, events: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as client:
        await wait_until_healthy(client, timeout=60)
        run = uuid.uuid4().hex[:6]
        await chat(client, f"warm-{run}")
        # The main thread (its tid is the pid) runs the event loop; the others are the store's
        # thread and the durable turns' lease keepers.
        before, loop_before, started = cpu_seconds(pid), cpu_seconds(pid, pid), time.perf_counter()
        deltas = await asyncio.gather(*(chat(client, f"live-{run}-{i}") for i in range(n)))
        wall, cpu, loop_cpu = time.perf_counter() - started, cpu_seconds(pid) - before, cpu_seconds(pid, pid) - loop_before
    assert min(deltas) > 0, deltas  # every chat streamed its answer (deltas may merge text events)
    return {"cpu": cpu, "loop_cpu": loop_cpu, "wall": wall}


async def idle(base: str, pid: int, count: int) -> float:
    """KiB of server RSS per idle WebSocket connection that has had its opening frames."""
    from websockets.asyncio.client import connect

    url = base.replace("http://", "ws://")
    run = uuid.uuid4().hex[:6]
    sockets: list[Any] = []

    async def open_one(i: int) -> None:
        ws = await connect(f"{url}/agents/think/idle-{run}-{i}", open_timeout=120, ping_interval=None)
        while '"cf_agent_identity"' not in str(await ws.recv()):
            pass
        sockets.append(ws)

    for i in range(0, 20):  # warm: the first connections pay for imports and caches
        await open_one(-1 - i)
    await asyncio.sleep(1)
    before = rss_kib(pid)
    for start in range(0, count, 200):  # in waves: the accept backlog is finite
        await asyncio.gather(*(open_one(i) for i in range(start, min(count, start + 200))))
    await asyncio.sleep(1)
    after = rss_kib(pid)
    await asyncio.gather(*(ws.close() for ws in sockets))
    return (after - before) / count


def measure(sizes: list[int], idle_count: int, events: int, gap: float, tmp: str) -> tuple[list[list[object]], list[list[object]]]:
    ideal = events * gap / 1000
    relayed: list[list[object]] = []
    memory: list[list[object]] = []
    with Upstream(events, gap) as upstream:
        for name, (extra, options) in CONFIGS.items():
            os.environ.update(extra)
            try:
                servers = Servers(os.path.join(tmp, f"{name}.db"), upstream, 1, options)
                with servers as [base]:
                    pid = servers.procs[0].pid
                    for n in sizes:
                        r = asyncio.run(relay(base, pid, n, events))
                        relayed.append([name, f"{n:,}", r["cpu"] / (n * events) * 1e6,
                                        r["loop_cpu"] / (n * events) * 1e6, r["cpu"] / n * 1000,
                                        r["wall"], f"{r['wall'] / ideal:.2f}"])
            finally:
                for key in extra:
                    os.environ.pop(key, None)
        for mode in WS_COMPRESSION if idle_count else ():
            servers = Servers(os.path.join(tmp, f"idle-{mode}.db"), upstream, 1, ("--ws-compression", mode))
            with servers as [base]:
                pid = servers.procs[0].pid
                per = asyncio.run(idle(base, pid, idle_count))
                memory.append([f"fast, --ws-compression {mode}", f"{idle_count:,}", per, rss_kib(pid) / 1024])
    return relayed, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,200", help="comma-separated numbers of concurrent chats")
    parser.add_argument("--idle", type=int, default=2000, help="idle WebSocket connections (0: skip)")
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--gap", type=float, default=20.0, help="ms between two events of one chat")
    args = parser.parse_args()
    raise_fd_limit()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        relayed, memory = measure(sizes, args.idle, args.events, args.gap, tmp)
    print(f"live_serve — {machine()}")
    print(f"{args.events} events per chat, one per write, {args.gap:g} ms apart (ideal wall "
          f"{args.events * args.gap / 1000:.1f} s)")
    print(table(["config", "N chats (HTTP)", "server CPU µs/event", "of which event loop", "server CPU ms/turn",
                 "wall s", "× ideal"], relayed))
    if memory:
        print()
        print(table(["config", "idle WebSockets", "server RSS KiB/connection", "server RSS MiB"], memory))
    print(f"(server CPU from /proc/<pid>/stat of the one think serve process; one run each, "
          f"compare rows of the same run; total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
