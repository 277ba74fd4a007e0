"""Three ``think serve`` processes on one PostgreSQL database, clients spread over them, one server
SIGKILLed mid-run: every accepted message is answered exactly once, no tool call runs twice,
every history is well-formed, and a WebSocket client on one server sees the turns the others run.

Real parts only: three server processes, a real PostgreSQL (``THINK_TEST_POSTGRES_URL``; ``.ci/run``
starts one), an OpenAI-compatible model on a loopback socket speaking SSE, real HTTP and
WebSocket clients, and a tool that appends every execution to a file shared by the processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.loopback import LoopbackServer
from tests.support.ledger_model import record_then_answer
from tests.support.postgres import fresh_database
from tests.support.serve import think_serve as serve
from tests.support.web import message_text, user
from think_core.server.testing import wait_until_healthy

DEADLINE = 120  # seconds: generous, the machine may be busy; nothing here is timed
ROOT = Path(__file__).resolve().parents[2]
SESSIONS = int(os.environ.get("THINK_TEST_MULTI_SESSIONS", "30"))
MESSAGES_PER_SESSION = int(os.environ.get("THINK_TEST_MULTI_MESSAGES", "10"))
#: Sessions whose messages go only to servers 1 and 2, watched over a WebSocket on server 0.
WATCHED = 3


@pytest.fixture
def pg_database() -> Iterator[str]:
    with fresh_database() as url:
        yield url


model_reply = partial(record_then_answer, call_delay=0.02, answer_delay=0.02)


def ledger_server(db: str, model_url: str, ledger: Path) -> Any:
    env = {**os.environ, "THINK_TEST_LEDGER": str(ledger), "PYTHONPATH": str(ROOT)}
    return serve(
        "--model", f"openai-compatible:m@{model_url}/v1", "--db", db, "--no-plugins", "--no-timeline",
        "--tools", "tests.support.ledger_tools:TOOLS", env=env, deadline=DEADLINE,
    )


class Cluster:
    """The servers, which are alive, and where a session's next message goes."""

    def __init__(self, bases: list[str]) -> None:
        self.bases = bases
        self.alive = [True] * len(bases)
        self.turn = 0

    def pick(self, session: str) -> str:
        candidates = [i for i, up in enumerate(self.alive) if up and (not session.startswith("watched") or i != 0)]
        self.turn += 1
        return self.bases[candidates[self.turn % len(candidates)]]


async def chat(cluster: Cluster, session: str, transcript: list[dict[str, Any]]) -> None:
    """POST one chat. A message counts as accepted once its stream has started (the server
    commits the submission first): a server killed under it is not asked again — the others
    must answer it. One that died before answering at all is sent again, as a client retries:
    the same message id, to another server."""
    body = {"id": session, "messages": transcript, "trigger": "submit-message"}
    for _ in range(len(cluster.bases) + 1):
        base = cluster.pick(session)
        accepted = False
        try:
            async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
                async with http.stream("POST", "/api/chat", json=body) as response:
                    assert response.status_code == 200, await response.aread()
                    accepted = True
                    async for _ in response.aiter_lines():
                        pass
            return
        except httpx.HTTPError:
            if accepted:
                return  # its server died mid-turn
            await asyncio.sleep(0.2)  # refused: that server is down; the cluster learns it is
    raise AssertionError(f"no server took {transcript[-1]['id']}")


async def converse(cluster: Cluster, session: str, sent: list[str]) -> None:
    transcript: list[dict[str, Any]] = []
    for k in range(MESSAGES_PER_SESSION):
        text = f"{session}-m{k}"
        transcript.append(user(text, f"{session}-u{k}"))
        sent.append(text)
        await chat(cluster, session, transcript)


async def watch(base: str, session: str, seen: list[str], ready: asyncio.Event, shown: set[str]) -> None:
    """A WebSocket client on server 0: collects the answer text of every turn it sees streamed,
    and (``shown``) of every answer in the transcripts it is sent."""
    async with connect(f"{base.replace('http://', 'ws://')}/agents/think/{session}") as ws:
        ready.set()
        texts: dict[str, str] = {}
        async for raw in ws:
            frame = json.loads(raw)
            if frame.get("type") == "cf_agent_chat_messages":
                shown.update(message_text(m) for m in frame["messages"] if m["role"] == "assistant")
            if frame.get("type") != "cf_agent_use_chat_response" or not frame.get("body"):
                continue
            chunk = json.loads(frame["body"])
            if chunk.get("type") == "start":  # a turn resumed elsewhere streams again from its start
                texts[frame["id"]] = ""
            elif chunk.get("type") == "text-delta":
                texts[frame["id"]] = texts.get(frame["id"], "") + chunk["delta"]
            elif chunk.get("type") == "finish":
                seen.append(texts.pop(frame["id"], ""))


async def settled(http: httpx.AsyncClient, session: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The session's messages and submissions once no submission of it is pending or running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while True:
        rows = (await http.get(f"/api/sessions/{session}/submissions")).json()["submissions"]
        if all(r["status"] not in ("pending", "running") for r in rows):
            return (await http.get(f"/api/sessions/{session}/messages")).json()["messages"], rows
        assert loop.time() < deadline, f"session {session} never settled: {rows}"
        await asyncio.sleep(0.25)


async def test_three_servers_one_killed_every_message_answered_exactly_once(pg_database: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    async with LoopbackServer(handler=model_reply) as llm:
        async with (
            ledger_server(pg_database, llm.url, ledger) as (_, base0),
            ledger_server(pg_database, llm.url, ledger) as (_, base1),
            ledger_server(pg_database, llm.url, ledger) as (victim, base2),
        ):
            cluster = Cluster([base0, base1, base2])
            async with httpx.AsyncClient(base_url=base0, timeout=DEADLINE) as http:
                for base in cluster.bases:
                    async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as probe:
                        await wait_until_healthy(probe, timeout=DEADLINE)
                sessions = [f"watched{i}" for i in range(WATCHED)] + [f"s{i}" for i in range(SESSIONS - WATCHED)]
                seen: dict[str, list[str]] = {s: [] for s in sessions[:WATCHED]}
                shown: dict[str, set[str]] = {s: set() for s in sessions[:WATCHED]}
                readies = [asyncio.Event() for _ in range(WATCHED)]
                watchers = [asyncio.create_task(watch(base0, s, seen[s], r, shown[s])) for s, r in zip(sessions, readies, strict=False)]
                await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), DEADLINE)

                sent: dict[str, list[str]] = {s: [] for s in sessions}
                talks = asyncio.gather(*(converse(cluster, s, sent[s]) for s in sessions))
                # Kill server 2 once a third of the tool calls ran: turns are in flight on it.
                total = SESSIONS * MESSAGES_PER_SESSION
                loop = asyncio.get_running_loop()
                deadline = loop.time() + DEADLINE
                while not ledger.exists() or len(ledger.read_text().splitlines()) < total // 3:
                    assert loop.time() < deadline, "the servers did not get going"
                    await asyncio.sleep(0.05)
                cluster.alive[2] = False
                victim.send_signal(signal.SIGKILL)
                assert await victim.wait() == -signal.SIGKILL
                await asyncio.wait_for(talks, DEADLINE * 3)

                histories = {s: await settled(http, s) for s in sessions}
                await asyncio.sleep(1)  # the watchers' last frames
                for task in watchers:
                    task.cancel()
                await asyncio.gather(*watchers, return_exceptions=True)

    executions = [json.loads(line) for line in ledger.read_text().splitlines()]
    runs = Counter(e["nonce"] for e in executions)
    assert [n for n, count in runs.items() if count > 1] == [], "a tool call ran twice"
    assert {e["pid"] for e in executions} >= {victim.pid}, "the victim ran nothing before it died"

    interrupted: list[dict[str, Any]] = []
    for session, (messages, submissions) in histories.items():
        users = [message_text(m) for m in messages if m["role"] == "user"]
        answers = [message_text(m) for m in messages if m["role"] == "assistant"]
        assert users == sent[session], f"{session}: user messages lost, doubled or reordered"
        assert Counter(answers) == Counter(f"Answer to {u}." for u in users), json.dumps([session, answers, submissions])
        for message in messages:  # every tool call has its result
            for part in message["parts"]:
                if part.get("type", "").startswith("tool-"):
                    # A call the kill cut off is answered with an error, never run a second time.
                    assert part.get("state") in ("output-available", "output-error"), (session, part)
                    if part["state"] == "output-error":
                        interrupted.append(part)

    print(f"tool executions={len(executions)} interrupted calls={len(interrupted)}: {[p.get('errorText') for p in interrupted]}")
    streamed = sum(len(set(v)) for v in seen.values())
    print(f"watched answers streamed to server 0's clients: {streamed} of {WATCHED * MESSAGES_PER_SESSION}")
    for session in seen:
        # Every turn of a watched session ran on server 1 or 2, and server 0's client saw each one:
        # streamed as it ran, or — when it was over before server 0 could read its stream — in
        # the transcript server 0 sends when it hears of the turn.
        expected = {f"Answer to {u}." for u in sent[session]}
        assert set(seen[session]) | shown[session] >= expected, (session, seen[session], shown[session])
        assert seen[session], f"{session}: no turn was streamed to server 0's client"
