"""Three ``think serve`` processes on one store (a PostgreSQL database, or one SQLite file), a chat
per session spread over them, one server SIGKILLed mid-run, and clients that never come back:
nobody opens the dead server's sessions again, yet the living servers finish every one of its
chats — each accepted message answered exactly once, within the lease and a few seconds, no tool
call run twice, no submission taken over by two servers. Submissions whose accepting process
died before claiming them (rows written straight into the store) are run the same way.

Real parts only: server processes, the store, an OpenAI-compatible model on a loopback socket
speaking SSE, HTTP clients, and a tool that appends every execution to a file shared by the
processes (``tests/support/ledger_tools.py``). The servers log at INFO (``-v``): their takeover
lines say which server took which submission.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections import Counter
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

import httpx

from tests.loopback import LoopbackServer
from tests.support.ledger_model import record_then_answer
from tests.support.serve import think_serve as serve
from tests.support.web import message_text, user
from think_core.server.testing import wait_until_healthy
from think_core.store import Store, open_store
from think_core.types import UIMessage

DEADLINE = 60  # seconds for anything not timed: generous, the machine may be busy
LEASE = 30.0  # think serve's submission lease (Think's default)
SLACK = 20.0  # "a few seconds" past the lease on a busy two-core machine: the turns themselves take ~3 s
ROOT = Path(__file__).resolve().parents[2]
SERVERS = 3
CHATS = int(os.environ.get("THINK_TEST_CLUSTER_CHATS", "30"))  # session i talks to server i % SERVERS
NEVER_CLAIMED = 3  # submissions accepted by a process that died before claiming them
VICTIM = SERVERS - 1
TAKEOVER = re.compile(r"(?:took over|picked up) submission (\w+) of session ([^\s:]+)")


# Step one calls ``record`` for the latest user message; step two answers it by name. Both
# stream slowly (~3 s a turn), so the kill finds the victim's turns in flight.
model_reply = partial(record_then_answer, call_delay=0.2, answer_delay=0.25)


def answer_to(text: str) -> str:
    return f"Answer to {text}."


class Chat:
    """One client: posts its message to its server and reads the answer until it ends or the
    server dies under it — then it gives up and never comes back."""

    def __init__(self, base: str, session: str) -> None:
        self.base, self.session, self.text = base, session, f"{session}-hello"
        self.accepted = asyncio.Event()

    async def run(self) -> None:
        body = {"id": self.session, "messages": [user(self.text, f"{self.session}-u")], "trigger": "submit-message"}
        try:
            async with httpx.AsyncClient(base_url=self.base, timeout=DEADLINE) as http:
                async with http.stream("POST", "/api/chat", json=body) as response:
                    assert response.status_code == 200, await response.aread()
                    self.accepted.set()  # the server commits the submission before the stream starts
                    async for _ in response.aiter_lines():
                        pass
        except httpx.HTTPError:
            assert self.accepted.is_set(), f"{self.session}: refused before the kill"


def accept_and_vanish(store: Store, session: str) -> None:
    """What a process that accepted a message and died before claiming it leaves behind."""
    store.create_submission(session, [UIMessage.model_validate(user(f"{session}-hello", f"{session}-u"))])


async def all_final(store: Store, since: float) -> float:
    """Seconds from ``since`` until no submission of the store is pending or running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while rows := await asyncio.to_thread(store.unfinished_submissions):
        assert loop.time() < deadline, f"left unfinished: {[(r.session_id, r.status, r.owner) for r in rows]}"
        await asyncio.sleep(0.2)
    return time.time() - since


async def test_a_dead_servers_chats_are_finished_by_the_living_ones(db: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    env = {**os.environ, "THINK_TEST_LEDGER": str(ledger), "PYTHONPATH": str(ROOT)}
    logs = [tmp_path / f"server{i}.log" for i in range(SERVERS)]
    async with LoopbackServer(handler=model_reply) as llm, AsyncExitStack() as stack:
        servers = []
        for log in logs:
            server = serve(
                "-v", "--model", f"openai-compatible:m@{llm.url}/v1", "--db", db, "--no-plugins", "--no-timeline",
                "--tools", "tests.support.ledger_tools:TOOLS", env=env, deadline=DEADLINE,
                stderr=stack.enter_context(log.open("wb")),
            )
            servers.append(await stack.enter_async_context(server))
        for _, base in servers:
            async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as probe:
                await wait_until_healthy(probe, timeout=DEADLINE)
        store = stack.enter_context(open_store(db))  # the test's own view of the shared store
        victim = servers[VICTIM][0]

        chats = [Chat(servers[i % SERVERS][1], f"s{i}") for i in range(CHATS)]
        talks = [asyncio.create_task(chat.run()) for chat in chats]
        await asyncio.wait_for(asyncio.gather(*(c.accepted.wait() for c in chats)), DEADLINE)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        while not ledger.exists() or str(victim.pid) not in ledger.read_text():
            assert loop.time() < deadline, "the victim ran no tool call"
            await asyncio.sleep(0.05)
        victim.send_signal(signal.SIGKILL)  # its turns are in flight: their tool calls ran, the answers stream
        killed_at = time.time()
        assert await victim.wait() == -signal.SIGKILL
        left = [r for r in await asyncio.to_thread(store.unfinished_submissions) if int(r.session_id[1:]) % SERVERS == VICTIM]
        assert left, "the victim had finished everything before it was killed: nothing to take over"
        await asyncio.to_thread(lambda: [accept_and_vanish(store, f"p{k}") for k in range(NEVER_CLAIMED)])

        took = await all_final(store, killed_at)
        await asyncio.wait_for(asyncio.gather(*talks), DEADLINE)
        histories = {s: await asyncio.to_thread(store.list_messages, s) for s in await asyncio.to_thread(store.list_sessions)}
        rows = {s: await asyncio.to_thread(store.list_submissions, s) for s in histories}
        for _, base in servers[:VICTIM]:  # the survivors are still healthy
            async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as probe:
                await wait_until_healthy(probe, timeout=DEADLINE)

    print(f"left behind by the kill: {len(left)} running or pending; all final {took:.1f} s after the kill")
    assert took < LEASE + SLACK, f"the dead server's chats took {took:.1f} s to finish"

    sessions = [c.session for c in chats] + [f"p{k}" for k in range(NEVER_CLAIMED)]
    assert sorted(histories) == sorted(sessions)
    for session in sessions:  # every accepted message answered exactly once
        text = f"{session}-hello"
        assert [(m.role, message_text(m)) for m in histories[session]] == [("user", text), ("assistant", answer_to(text))], (
            session, histories[session], rows[session])
        [row] = rows[session]
        assert row.status == "completed", row

    executions = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [n for n, count in Counter(e["nonce"] for e in executions).items() if count > 1] == [], "a tool call ran twice"

    taken: list[tuple[int, str, str]] = []  # (server, submission, session), from the survivors' INFO lines
    for i, log in enumerate(logs[:VICTIM]):
        taken += [(i, m.group(1), m.group(2)) for m in TAKEOVER.finditer(log.read_text())]
    print(f"taken over per surviving server: {dict(Counter(server for server, _, _ in taken))}")
    twice = [sid for sid, n in Counter(sid for _, sid, _ in taken).items() if n > 1]
    assert twice == [], f"taken over by two servers: {twice}"
    taken_sessions = {session for _, _, session in taken}
    assert {r.session_id for r in left if r.status == "running"} <= taken_sessions, (left, taken)
    assert {f"p{k}" for k in range(NEVER_CLAIMED)} <= taken_sessions, taken
    assert not taken_sessions - {r.session_id for r in left} - {f"p{k}" for k in range(NEVER_CLAIMED)}, (
        "a living server's chat was taken over", taken)
