"""An accepted message survives a database restart.

A real ``think serve`` on a PostgreSQL cluster of its own (``bench/pg_local.sh``), restarted with
``pg_ctl restart`` between two chats and in the middle of a turn, and stopped for longer than the
store retries: the pooled connections the restart killed are replaced, a store call that failed
before its commit is run again, an accepted chat is never failed for it (it is answered once the
database is back), and one that cannot be accepted gets a 503 — never a bare ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.serve import ROOT, think_serve
from tests.support.web import message_text, user
from think_core.server.testing import wait_until_healthy

END = "keep what was said."
PG_LOCAL = str(ROOT / "bench" / "pg_local.sh")


@contextmanager
def own_cluster() -> Iterator[tuple[str, str]]:
    """A PostgreSQL cluster of this test's own: ``(url, directory)``; removed afterwards."""
    if shutil.which("pg_ctl") is None and not list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")):
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the database restart test, but no PostgreSQL server binaries are installed")
        pytest.skip("no PostgreSQL server binaries (the Debian package postgresql)")
    out = subprocess.run(["bash", PG_LOCAL, "start"], check=True, capture_output=True, text=True).stdout
    env = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines() if line.startswith("export "))
    try:
        yield env["THINK_TEST_POSTGRES_URL"], env["THINK_PG_DIR"]
    finally:
        subprocess.run(["bash", PG_LOCAL, "stop", env["THINK_PG_DIR"]], check=False, capture_output=True)


async def pg(command: str, directory: str) -> None:
    """``restart``, ``pause`` or ``resume`` the cluster's server."""
    process = await asyncio.create_subprocess_exec("bash", PG_LOCAL, command, directory)
    assert await process.wait() == 0, command


@asynccontextmanager
async def served(url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    env = {**os.environ, "THINK_HOME": str(tmp_path), "THINK_DEMO_DELAY": "0.05", "PYTHONUNBUFFERED": "1"}
    env.pop("THINK_API_TOKEN", None)
    with (tmp_path / "serve.log").open("wb") as log:
        async with think_serve("--model", "demo", "--db", url, env=env, stderr=log) as (_, base):
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                await wait_until_healthy(http, timeout=30)
                yield http


def chunks_of(raw: str) -> list[dict[str, Any]]:
    return [json.loads(e[6:]) for e in raw.split("\n\n") if e.startswith("data: {")]


async def history(http: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    response = await http.get(f"/api/sessions/{session}/messages")
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


async def answered_history(http: httpx.AsyncClient, session: str, turns: int, deadline: float = 90) -> list[dict[str, Any]]:
    """The session's history once it holds ``turns`` user messages, each with one whole answer."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    messages: list[dict[str, Any]] = []
    while loop.time() < end:
        try:
            messages = await history(http, session)
            rows = (await http.get(f"/api/sessions/{session}/submissions")).json()["submissions"]
        except (httpx.TransportError, AssertionError, KeyError):
            await asyncio.sleep(0.5)
            continue
        if len(messages) == 2 * turns and rows and all(r["status"] == "completed" for r in rows):
            return messages
        await asyncio.sleep(0.25)
    raise AssertionError(f"not answered within {deadline} s: {[(m['role'], message_text(m)[-30:]) for m in messages]}")


def one_whole_answer_each(messages: list[dict[str, Any]]) -> None:
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)
    for reply in messages[1::2]:
        assert message_text(reply).endswith(END), message_text(reply)[-80:]
        assert not (reply.get("metadata") or {}).get("error")


async def test_chats_before_during_and_after_a_database_restart_are_each_answered_once(tmp_path: Path) -> None:
    with own_cluster() as (url, directory):
        async with served(url, tmp_path) as http:
            first = await http.post("/api/chat", json={"id": "c", "messages": [user("hello", "u1")]})
            assert first.status_code == 200 and chunks_of(first.text)[-1]["type"] == "finish"

            # Between two chats: every pooled connection is dead after this.
            await pg("restart", directory)
            second = await http.post("/api/chat", json={"id": "c", "messages": [user("hello again", "u2")]})
            assert second.status_code == 200, second.text
            assert [c["type"] for c in chunks_of(second.text)][-1] == "finish", second.text[-300:]

            # In the middle of a turn: the turn's store writes meet the restart.
            async with http.stream("POST", "/api/chat", json={"id": "c", "messages": [user("hello once more", "u3")]}) as streaming:
                assert streaming.status_code == 200
                deltas = 0
                async for line in streaming.aiter_lines():
                    deltas += '"text-delta"' in line
                    if deltas == 5:
                        await pg("restart", directory)
            messages = await answered_history(http, "c", 3)
    one_whole_answer_each(messages)
    assert [m["id"] for m in messages[0::2]] == ["u1", "u2", "u3"]


async def test_a_database_down_for_a_while_gets_503s_and_every_accepted_chat_is_answered_once_it_is_back(
    tmp_path: Path,
) -> None:
    with own_cluster() as (url, directory):
        async with served(url, tmp_path) as http:
            # Accepted, then the database goes away mid-turn for longer than the store retries.
            body = {"id": "d", "messages": [user("hello", "u1")]}
            async with http.stream("POST", "/api/chat", json=body) as streaming:
                seen: list[str] = []
                paused = False
                async for line in streaming.aiter_lines():
                    if line.startswith("data: "):
                        seen.append(line)
                    if not paused and sum('"text-delta"' in s for s in seen) == 5:
                        await pg("pause", directory)
                        paused = True
            # The client is told, not left with a bare end of stream.
            assert seen[-1] == "data: [DONE]"
            assert any('"type":"error"' in s and "database is unavailable" in s for s in seen), seen[-3:]

            # Not accepted while it is down: a clear 503, nothing stored anywhere.
            refused = await http.post("/api/chat", json={"id": "e", "messages": [user("hello", "v1")]})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["type"] == "unavailable"

            await pg("resume", directory)
            # The accepted chat is answered without anyone asking; the refused one when sent again.
            messages = await answered_history(http, "d", 1)
            again = await http.post("/api/chat", json={"id": "e", "messages": [user("hello", "v1")]})
            assert again.status_code == 200, again.text
            refused_then_sent = await answered_history(http, "e", 1)
    one_whole_answer_each(messages)
    one_whole_answer_each(refused_then_sent)
