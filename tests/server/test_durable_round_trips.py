"""What one durable chat costs the store: a chat request to ``think serve`` (a tool call, then
the answer) is at most 8 store transactions on SQLite and PostgreSQL — its accept (the window
it is checked against with the session's stream, then the submission), the claim, its input
with its stream opened and the history read, a step's journal (its model output with the tool
call about to run, the result, the finished step) and its answer with the completion and the
stream's end — counted through a proxy on the real server, with the answer checked."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench._counting import CountingStore
from tests.loopback import LoopbackServer, Reply
from tests.support.postgres import drop_schema, postgres_url
from tests.support.wire import oa_text, oa_tool_call, openai_model
from think_core import Think, tool
from think_core.server import create_app
from think_core.server.testing import running_server
from think_core.store import SQLiteStore, Store

MAX_TRANSACTIONS = 8


@tool
def record(note: str) -> str:
    """Record a note (not idempotent)."""
    return f"recorded {note}"


@pytest.fixture(params=["sqlite-file", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite-file":
        with SQLiteStore(tmp_path / "chats.db") as opened:
            yield opened
        return
    from think_core.store.postgres import PostgresStore

    url, schema = postgres_url(), f"t_{uuid.uuid4().hex[:16]}"
    with PostgresStore(url, schema=schema) as opened:
        yield opened
    drop_schema(url, schema)


async def chat(http: httpx.AsyncClient, session: str, k: int) -> str:
    body = {"id": session, "trigger": "submit-message",
            "messages": [{"id": f"u{k}", "role": "user", "parts": [{"type": "text", "text": f"note {k}"}]}]}
    async with http.stream("POST", "/api/chat", json=body) as response:
        assert response.status_code == 200
        return "".join([piece async for piece in response.aiter_text()])


async def test_a_durable_chat_with_a_tool_call_is_at_most_8_transactions(store: Store, loopback: LoopbackServer) -> None:
    counting = CountingStore(store)
    agent = Think(openai_model(loopback), store=counting, tools=[record], load_entrypoints=False)
    for k in range(2):
        loopback.enqueue(Reply.sse(oa_tool_call(f"call_{k}", "record", f'{{"note": "n{k}"}}')), Reply.sse(oa_text(f"Noted {k}.")))
    async with agent, running_server(create_app(agent, timeline=False)) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        assert "Noted 0." in await chat(http, "s", 0)  # the first chat also opens the session
        await agent.session("s").submissions_drained()
        counting.recording = True
        assert "Noted 1." in await chat(http, "s", 1)
        await agent.session("s").submissions_drained()
        counting.recording = False
        calls, _ = counting.request_calls()
        messages = await agent.session("s").messages()
    transactions = sum(n for method, n in calls.items() if method not in ("submission_owner", "session_lock"))
    assert transactions <= MAX_TRANSACTIONS, calls
    answer = messages[-1]
    assert [m.id for m in messages[:-1]] == ["u0", messages[1].id, "u1"]
    assert answer.role == "assistant" and answer.text.endswith("Noted 1.")
    assert any(p.get("output") == "recorded n1" for p in answer.parts)
