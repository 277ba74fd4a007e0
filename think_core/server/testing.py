"""Run the app on a real socket inside the current event loop (tests, notebooks, embedding).

    async with running_server(create_app(agent)) as base_url:
        ...  # http://127.0.0.1:<free port>

A real uvicorn server, not an in-process transport, so tests exercise the same HTTP and
WebSocket stacks that clients talk to.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn

from .app import DEFAULT_MAX_BODY_BYTES, ws_frame_limit
from .ws_protocol import uvicorn_ws_options


@contextlib.asynccontextmanager
async def running_server(app: Any, *, host: str = "127.0.0.1", port: int = 0, startup_timeout: float = 10.0) -> AsyncIterator[str]:
    """Serve ``app`` on ``host:port`` (``0`` = a free port) and yield its base URL; shut the
    server down (lifespan included) on exit."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        **uvicorn_ws_options(),  # as think serve does
        # Frames a little above the app's limit reach it (its error frame), as under think serve.
        ws_max_size=ws_frame_limit(getattr(getattr(app, "state", None), "max_body_bytes", DEFAULT_MAX_BODY_BYTES)),
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(), name="think-test-server")
    try:
        deadline = asyncio.get_running_loop().time() + startup_timeout
        while not server.started:
            if task.done():
                await task
                raise RuntimeError("uvicorn stopped during start-up")
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"uvicorn did not start within {startup_timeout}s")
            await asyncio.sleep(0.01)
        bound = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        await task


async def wait_until_healthy(http: httpx.AsyncClient, *, timeout: float = 5.0) -> None:
    """Poll ``/healthz`` until it answers 200: a server started in another process (``think
    serve``) binds its socket before the app has finished starting."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            if (await http.get("/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{http.base_url} did not become healthy within {timeout}s")
        await asyncio.sleep(0.05)
