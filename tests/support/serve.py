"""``think serve`` as a real child process, for tests that kill or restart servers."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def think_serve(
    *args: str, env: Mapping[str, str] | None = None, deadline: float = 60, stderr: IO[bytes] | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """Start ``think serve --port 0 ARGS...``; yields the process and its base URL once it
    listens, and kills it (if still alive) on exit. Its stderr goes to ``stderr`` (a file
    opened for writing) when given, else nowhere."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "think_core.cli", "serve", "--port", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=stderr if stderr is not None else asyncio.subprocess.DEVNULL,
        env=env, cwd=ROOT,
    )
    drain: asyncio.Task[None] | None = None
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), deadline)).decode()
        assert line.startswith("think: serving on http://127.0.0.1:"), line
        # Keep reading what the server prints (its access log goes to stdout): a pipe nobody
        # reads fills at 64 KiB and then blocks the server's event loop on its next log line.
        drain = asyncio.create_task(_discard(proc.stdout))
        yield proc, line.split()[3]
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        if drain is not None:
            await drain


async def _discard(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass
