"""A chat WebSocket as the server tests speak it: a server for WebSocket clients (``serve``), a
cf_agent_* client on it (``client``, :class:`Client`), and reading its frames past the server's
hook-timeline frames (``recv``, ``until``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from think_core.agent import Think
from think_core.server import create_app
from think_core.server.testing import running_server

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


class Client:
    """A cf_agent_* client: sends frames, receives them with a timeout."""

    def __init__(self, ws: ClientConnection, session_id: str) -> None:
        self.ws = ws
        self.session_id = session_id
        self.identified = False
        self.timeline: list[dict[str, Any]] = []
        self.opening: list[dict[str, Any]] = []
        self._pending: list[dict[str, Any]] = []
        self.closing: list[dict[str, Any]] | None = None

    async def _opening(self) -> None:
        identity = {"type": "cf_agent_identity", "name": self.session_id, "agent": "think"}
        frames = [json.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT))]
        if frames[0] != identity:  # (a session that cannot open sends the identity, then its error)
            frames += [json.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT)) for _ in range(2)]
            history, resume, last = frames
            assert history["type"] == "cf_agent_chat_messages" and history["connect"] is True, frames
            assert resume["type"] in ("cf_agent_stream_resume_none", "cf_agent_stream_resuming", "cf_agent_stream_pending"), frames
            assert last == identity, frames
            self._pending = [history]
        self.identified, self.opening = True, frames

    async def send(self, frame: Any) -> None:
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    async def recv(self, *, keep_timeline: bool = False) -> dict[str, Any]:
        """The next frame; hook timeline frames are collected aside unless asked for. The frames
        that open the connection — the history, the resume state, the identity, in this order —
        are checked; the history is the first frame returned, the other two are kept aside."""
        while True:
            if not self.identified:
                await self._opening()
            if self._pending:
                return self._pending.pop(0)
            frame = json.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT))
            if frame.get("type") == "think_timeline" and not keep_timeline:
                self.timeline.append(frame)
                continue
            return frame

    async def until(self, predicate: Callable[[dict[str, Any]], bool]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Frames up to and including the first that satisfies ``predicate``."""
        seen: list[dict[str, Any]] = []
        while True:
            frame = await self.recv()
            seen.append(frame)
            if predicate(frame):
                return frame, seen

    async def stream(self, stream_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``(chunks, frames)`` of the stream ``stream_id`` up to its done frame, checking the
        frame shape on the way; ``frames`` are all frames received meanwhile."""
        chunks: list[dict[str, Any]] = []
        frames: list[dict[str, Any]] = []
        while True:
            frame = await self.recv()
            frames.append(frame)
            if frame.get("type") != "cf_agent_use_chat_response" or frame.get("id") != stream_id:
                continue
            assert isinstance(frame["body"], str)
            if frame["done"]:
                assert frame["body"] == "" and "error" not in frame, frame
                # The transcript a turn ends with comes before its done frame.
                closing = [f for f in frames if f["type"] == "cf_agent_chat_messages"]
                self.closing = closing[-1]["messages"] if closing else None
                return chunks, frames
            assert frame["done"] is False
            chunks.append(json.loads(frame["body"]))

    async def snapshot(self) -> list[dict[str, Any]]:
        """The transcript the last :meth:`stream` ended with, else the next snapshot."""
        if self.closing is not None:
            messages, self.closing = self.closing, None
            return messages
        frame, _ = await self.until(lambda f: f["type"] == "cf_agent_chat_messages")
        return frame["messages"]


@asynccontextmanager
async def serve(agent: Think, **app_kwargs: Any) -> AsyncIterator[str]:
    async with running_server(create_app(agent, **app_kwargs)) as base:
        yield base.replace("http://", "ws://")


@asynccontextmanager
async def client(base: str, session_id: str = "s1", query: str = "", **kwargs: Any) -> AsyncIterator[Client]:
    async with connect(f"{base}/agents/think/{session_id}{query}", **kwargs) as ws:
        yield Client(ws, session_id)
