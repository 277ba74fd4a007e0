"""Reading a chat WebSocket's frames, past the server's hook-timeline frames."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection

TIMEOUT = 20.0


async def recv(ws: ClientConnection, timeout: float = TIMEOUT) -> dict[str, Any]:
    """The next frame that is not a ``think_timeline`` frame (each waited for up to ``timeout`` s)."""
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if frame["type"] != "think_timeline":
            return frame


async def until(ws: ClientConnection, predicate: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """The frames :func:`recv` reads up to and including the first ``predicate`` accepts."""
    seen = []
    while True:
        seen.append(await recv(ws))
        if predicate(seen[-1]):
            return seen
