"""``think serve`` SIGKILLed in the middle of a chat and started again on the same ``--db``:
the chat's turn completes on its own — no client sends anything again — and the history holds
the user's message once and exactly one answer (real server processes, real HTTP and
WebSocket clients)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.support.postgres import fresh_database
from tests.support.serve import think_serve as serve
from tests.support.web import chat_request, user
from think_core.cli.demo_model import INTRODUCTION
from think_core.server.testing import wait_until_healthy

DEADLINE = 60  # seconds: generous, the machine may be busy; nothing here is timed


def think_serve(db: str) -> Any:
    return serve("--model", "demo", "--db", db, deadline=DEADLINE)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The server's --db: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield str(tmp_path / "chats.db")
        return
    with fresh_database() as url:
        yield url


async def start_http_chat(base: str) -> asyncio.Task[Any]:
    """Post a chat; return once its answer has begun to stream, with the task still reading it."""
    body = {"id": "crash", "messages": [user("Who are you?", "u1")], "trigger": "submit-message"}
    client = httpx.AsyncClient(base_url=base, timeout=DEADLINE)
    started = asyncio.get_running_loop().create_future()

    async def read() -> None:
        try:
            async with client.stream("POST", "/api/chat", json=body) as response:
                async for line in response.aiter_lines():
                    if '"text-delta"' in line and not started.done():
                        started.set_result(None)
        except httpx.HTTPError:
            pass  # the server was killed under it
        finally:
            await client.aclose()

    reader = asyncio.create_task(read())
    await asyncio.wait_for(started, DEADLINE)
    return reader


async def start_websocket_chat(base: str) -> asyncio.Task[Any]:
    """Send a chat frame; return once its answer has begun to stream, with a task closing the socket."""
    ws = await connect(f"{base.replace('http://', 'ws://')}/agents/think/crash")
    await ws.send(json.dumps(chat_request("r1", [user("Who are you?", "u1")])))
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), DEADLINE))
        if frame.get("type") == "cf_agent_use_chat_response" and '"text-delta"' in frame.get("body", ""):
            break
    return asyncio.create_task(ws.close())


@pytest.mark.parametrize("start_chat", [start_http_chat, start_websocket_chat], ids=["http", "websocket"])
async def test_a_chat_cut_off_by_sigkill_is_answered_after_the_restart(db: str, start_chat: Any) -> None:
    async with think_serve(db) as (proc, base):
        async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
            await wait_until_healthy(http, timeout=DEADLINE)
        client = await start_chat(base)
        proc.send_signal(signal.SIGKILL)  # mid-answer: the demo streams a word every 50 ms
        assert await proc.wait() == -signal.SIGKILL
    await asyncio.gather(client, return_exceptions=True)  # the client gives up; it never comes back

    async with think_serve(db) as (_, base), httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
        await wait_until_healthy(http, timeout=DEADLINE)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        while True:
            [row] = (await http.get("/api/sessions/crash/submissions")).json()["submissions"]
            if row["status"] not in ("pending", "running"):
                break
            assert loop.time() < deadline, f"the interrupted chat was not resumed: {row}"
            await asyncio.sleep(0.2)
        messages = (await http.get("/api/sessions/crash/messages")).json()["messages"]

    assert row["status"] == "completed" and row["idempotency_key"] == "u1"
    assert [(m["role"], m["id"]) for m in messages] == [("user", "u1"), ("assistant", row["answer_message_id"])]
    answer = "".join(p.get("text", "") for p in messages[1]["parts"])
    assert answer == INTRODUCTION  # one whole answer, not the cut-off start plus another
