"""Does a server's memory stay flat as chats arrive on ever new sessions?

Starts ``think serve --model demo`` (no streaming delay) on a SQLite file, sends ``--chats`` HTTP
chats each on a session of its own (``--concurrency`` at a time, as many browsers would), and
prints the server's resident memory (``/proc/<pid>/status``) every ``--every`` chats. Once the
idle-session cache (1,000 sessions by default) is full, the figure should stay flat: what a
session keeps in memory is dropped with it.

    python bench/session_memory.py --chats 10000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "THINK_HOME": home, "THINK_DEMO_DELAY": "0", "PYTHONUNBUFFERED": "1"}
        env.pop("THINK_API_TOKEN", None)
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "think_core.cli", "serve", "--model", "demo", "--port", "0",
            "--db", str(Path(home) / "chats.db"), "--no-timeline",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env, cwd=ROOT,
        )
        try:
            assert server.stdout is not None
            base = (await server.stdout.readline()).decode().split()[3]
            # Read on what the server prints (its access log): an unread pipe fills at 64 KiB and
            # then blocks the server's event loop on its next log line.
            drain = asyncio.create_task(_discard(server.stdout))
            print(f"session_memory — {os.cpu_count()} CPU(s), Python {sys.version.split()[0]}; server RSS in MiB")
            print("| chats | RSS MiB |\n|------:|--------:|")
            print(f"| 0 | {rss_mib(server.pid):.0f} |")
            queue: asyncio.Queue[int] = asyncio.Queue()
            for i in range(args.chats):
                queue.put_nowait(i)
            done = 0
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:

                async def worker() -> None:
                    nonlocal done
                    while not queue.empty():
                        i = queue.get_nowait()
                        body = {"id": f"s{i}", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}]}
                        response = await http.post("/api/chat", json=body)
                        assert response.status_code == 200, response.text
                        done += 1
                        if done % args.every == 0:
                            print(f"| {done} | {rss_mib(server.pid):.0f} |", flush=True)

                await asyncio.gather(*(worker() for _ in range(args.concurrency)))
            server.terminate()
            await drain
        finally:
            if server.returncode is None:
                server.terminate()
            await server.wait()


async def _discard(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


if __name__ == "__main__":
    asyncio.run(main())
