"""Reliability under injected faults: many turns, concurrent sessions, a real socket.

A loopback OpenAI-compatible server answers every request with a fault chosen by a seeded RNG
(keyed by session, turn, step and attempt, so concurrency does not change which request gets
which fault): 429 with a small ``retry-after-ms``, 5xx, connection resets (before and during
the stream), truncated streams (no finish, no ``[DONE]``), malformed JSON data lines, in-stream
error events, slow chunks — or a clean answer. Some turns call tools (one or two parallel calls;
the tools count their executions per tool-call id, which the server puts in the arguments);
some turns are cancelled mid-stream. Turns run through ``Think`` with ``OpenAIChatModel``
(fast retry policy) over a SQLite file store, sessions concurrently (``asyncio.gather``).

Invariants: every turn ends ``completed``, ``error`` or ``aborted``; each session's stored user
messages are exactly the ones sent, in order; no tool call id runs twice; no asyncio task and
no connection outlives the run. One summary line is printed (visible under ``-q``).

Size: ``THINK_RELIABILITY_TURNS`` (default 300) for the quick test that CI runs; the test marked
``slow`` runs ``THINK_RELIABILITY_LONG_TURNS`` (default 1500). ``THINK_RELIABILITY_SEED`` picks
the fault sequence.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.loopback import LoopbackServer, RecordedRequest, Reply, sse_body
from think_core import Think, hookimpl, tool
from think_core.models.openai import OpenAIChatModel
from think_core.models.retry import RetryPolicy

TURNS = int(os.environ.get("THINK_RELIABILITY_TURNS", "300"))
LONG_TURNS = int(os.environ.get("THINK_RELIABILITY_LONG_TURNS", "1500"))
SEED = int(os.environ.get("THINK_RELIABILITY_SEED", "20240611"))

FAST = RetryPolicy(max_retries=2, cap_seconds=1.0, initial_delay=0.001, max_delay=0.005)

# Relative weights of what a request gets.
FAULTS = {
    "ok": 40,
    "slow": 10,
    "429": 8,
    "5xx": 8,
    "reset_before_output": 5,
    "reset_mid_stream": 6,
    "truncated": 6,
    "malformed_json": 6,
    "stream_error": 6,
}
CANCEL_SHARE = 0.05  # turns cancelled once they have streamed something
TOOL_SHARE = 0.4  # turns whose first step asks for tools


# -- the wire ---------------------------------------------------------------------------------------


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-r", "object": "chat.completion.chunk", "model": "m", "choices": choices, **extra}


def _split(text: str, rng: random.Random, pieces: int) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(pieces - 1, len(text) - 1)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@dataclass
class Plan:
    """What the server answers for one request: the chunks of a good answer, then a fault."""

    content: list[dict[str, Any]]  # payloads that make output (text or tool-call deltas)
    finish: str
    tool_calls: list[str] = field(default_factory=list)  # call ids issued by this answer


class FaultyProvider:
    """The handler of the loopback server (see the module docstring)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.attempts: Counter[tuple[str, int]] = Counter()
        self.faults: Counter[str] = Counter()
        self.issued_calls: set[str] = set()
        self.kinds = list(FAULTS)
        self.weights = list(FAULTS.values())

    def __call__(self, request: RecordedRequest) -> Reply:
        messages = request.json["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        turn_key = messages[last_user]["content"]  # "<session>:<turn>", unique per turn
        step = sum(1 for m in messages[last_user:] if m["role"] == "tool")
        attempt = self.attempts[(turn_key, step)]
        self.attempts[(turn_key, step)] += 1
        rng = random.Random(f"{self.seed}:{turn_key}:{step}:{attempt}")
        fault = rng.choices(self.kinds, self.weights)[0]
        self.faults[fault] += 1
        plan = self._plan(turn_key, step, attempt, rng)
        return self._reply(plan, fault, rng)

    def _plan(self, turn_key: str, step: int, attempt: int, rng: random.Random) -> Plan:
        wants_tools = random.Random(f"{self.seed}:{turn_key}:tools").random() < TOOL_SHARE
        if step == 0 and wants_tools:
            calls = []
            content: list[dict[str, Any]] = []
            for index in range(rng.choice((1, 1, 2))):
                call_id = f"call_{turn_key}_{attempt}_{index}".replace(":", "_")
                name = rng.choice(("record", "slow_lookup", "echo"))
                args = {"record": {"call": call_id, "amount": rng.randint(1, 9)},
                        "slow_lookup": {"call": call_id, "key": f"k{rng.randint(1, 99)}"},
                        "echo": {"text": f"echo {turn_key}"}}[name]
                content.append(_chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                                       "function": {"name": name, "arguments": ""}}]}))
                for piece in _split(json.dumps(args), rng, rng.randint(1, 4)):
                    content.append(_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
                calls.append(call_id)
            return Plan(content, "tool_calls", calls)
        text = f"Answer to {turn_key}, step {step}."
        return Plan([_chunk({"content": p}) for p in _split(text, rng, rng.randint(2, 6))], "stop")

    def _reply(self, plan: Plan, fault: str, rng: random.Random) -> Reply:
        head = [_chunk({"role": "assistant", "content": ""})]
        tail = [_chunk({}, plan.finish), _chunk(None, usage={"prompt_tokens": 9, "completion_tokens": 4,
                                                            "total_tokens": 13})]
        good = head + plan.content + tail
        if fault in ("ok", "slow"):
            self.issued_calls.update(plan.tool_calls)
            return Reply.sse(sse_body(*good, done=True), chunk_delay=rng.uniform(0.001, 0.004) if fault == "slow" else 0)
        if fault == "429":
            body = {"error": {"message": "Rate limit reached", "type": "tokens", "code": "rate_limit_exceeded"}}
            return Reply.json(body, status=429, headers={"retry-after-ms": str(rng.randint(1, 5))})
        if fault == "5xx":
            body = {"error": {"message": "The server had an error", "type": "server_error"}}
            return Reply.json(body, status=rng.choice((500, 502, 503)))
        # Faults inside a 200 stream: ``cut`` content chunks are sent before it (0 = before output).
        cut = rng.randint(0, len(plan.content))
        before = head + plan.content[:cut]
        if fault == "reset_before_output":
            return Reply.sse(sse_body(*head), disconnect_after=rng.randint(0, 1), reset=True)
        if fault == "reset_mid_stream":
            return Reply.sse(sse_body(*good, done=True), disconnect_after=len(head) + cut, reset=rng.random() < 0.5)
        if fault == "truncated":
            return Reply.sse(sse_body(*before))  # a clean end of the body, without finish or [DONE]
        if fault == "malformed_json":
            return Reply.sse(sse_body(*before) + 'data: {"id": "chatcmpl-r", "choices": [{"delta": \n\n')
        assert fault == "stream_error"
        error = {"error": {"message": "stream failed", "type": "server_error", "param": None, "code": None}}
        return Reply.sse(sse_body(*before, error, done=True))


class CountingServer(LoopbackServer):
    """The loopback server, counting its open connections."""

    open_connections = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open_connections += 1
        try:
            await super()._serve(reader, writer)
        finally:
            self.open_connections -= 1


# -- the agent side ------------------------------------------------------------------------------


def counting_tools(executions: Counter[str]) -> list[Any]:
    @tool(idempotent=False)
    def record(call: str, amount: int) -> dict:
        """Record an amount (counts its executions per call id)."""
        executions[call] += 1
        return {"recorded": amount}

    @tool(read_only=True)
    async def slow_lookup(call: str, key: str) -> str:
        """Look a key up, slowly (counts its executions per call id)."""
        executions[call] += 1
        await asyncio.sleep(0.002)
        return f"value of {key}"

    @tool(read_only=True)
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    return [record, slow_lookup, echo]


class StreamedRequests:
    """Notes which turns have streamed a chunk (so a cancellation lands mid-turn)."""

    name = "streamed_requests"

    def __init__(self) -> None:
        self.seen: set[str] = set()

    @hookimpl
    def on_chunk(self, ctx: Any) -> None:
        self.seen.add(ctx.request_id)


@dataclass
class Report:
    turns: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    duplicated: int = 0
    double_executions: int = 0
    tool_executions: int = 0
    problems: list[str] = field(default_factory=list)  # invariant violations, asserted by check()

    def line(self) -> str:
        faults = ",".join(f"{k}:{v}" for k, v in sorted(self.faults.items()))
        return (
            f"reliability: turns={self.turns} completed={self.statuses['completed']} "
            f"error={self.statuses['error']} aborted={self.statuses['aborted']} retries={self.retries} "
            f"tool_executions={self.tool_executions} faults={{{faults}}} lost={self.lost} "
            f"duplicated={self.duplicated} double_executions={self.double_executions}"
        )


async def audit_store(
    db: Path, sent: dict[str, list[str]], executions: Counter[str], issued_calls: Any, report: Report
) -> None:
    """What the store holds, read back through a fresh agent (a new connection to the file)."""
    reader = Think(store=str(db), load_entrypoints=False)
    try:
        for session_id, texts in sent.items():
            messages = await reader.session(session_id).messages()
            stored = [m.text for m in messages if m.role == "user"]
            report.lost += sum(1 for t in texts if t not in stored)
            report.duplicated += len(stored) - len(set(stored)) + sum(1 for t in stored if t not in texts)
            if stored != texts:
                report.problems.append(f"{session_id}: stored user messages {stored} != sent {texts}")
            for message in messages:
                for part in message.parts:
                    call_id = part.get("toolCallId")
                    if part.get("state") != "output-available" or part.get("type") == "tool-echo":
                        continue
                    if executions[call_id] != 1 or call_id not in issued_calls:
                        report.problems.append(f"{call_id}: stored as done, executed {executions[call_id]} time(s)")
    finally:
        await reader.aclose()


async def report_leaked_tasks(baseline: set[asyncio.Task[Any]], report: Report) -> None:
    """Tasks still pending once the loop has had time to run them are leaks.

    Finalizers of async generators collected by the GC are short-lived tasks: they get that time.
    """
    leaked: list[asyncio.Task[Any]] = []
    for _ in range(100):
        leaked = [t for t in asyncio.all_tasks() - baseline if not t.done()]
        if not leaked:
            break
        await asyncio.sleep(0.01)
    if leaked:
        report.problems.append(f"tasks outlived the run: {leaked}")


async def run_reliability(turns: int, seed: int, db: Path, sessions: int = 10) -> Report:
    baseline = set(asyncio.all_tasks())
    provider = FaultyProvider(seed)
    executions: Counter[str] = Counter()
    streamed = StreamedRequests()
    responses: list[httpx.Response] = []

    async def track(response: httpx.Response) -> None:
        responses.append(response)

    server = await CountingServer(provider).start()
    client = httpx.AsyncClient(timeout=httpx.Timeout(10.0), event_hooks={"response": [track]})
    # Half the sessions share a pooled client; the others use a client per call.
    shared = OpenAIChatModel("m", base_url=server.url + "/v1", api_key="sk", client=client, retry_policy=FAST)
    own = OpenAIChatModel("m", base_url=server.url + "/v1", api_key="sk", retry_policy=FAST)
    agents = [
        Think(model, tools=counting_tools(executions), plugins=[streamed], store=str(db), load_entrypoints=False)
        for model in (shared, own)
    ]
    sent: dict[str, list[str]] = {}
    statuses: Counter[str] = Counter()
    per_session = [turns // sessions + (1 if i < turns % sessions else 0) for i in range(sessions)]

    async def cancel_when_streaming(session: Any, request_id: str, task: asyncio.Task[Any], delay: float) -> None:
        while not task.done():
            if request_id in streamed.seen:
                await asyncio.sleep(delay)
                session.cancel(request_id)
                return
            await asyncio.sleep(0.001)

    async def run_session(index: int) -> None:
        agent = agents[index % 2]
        session_id = f"s{index}"
        session = agent.session(session_id)
        sent[session_id] = []
        rng = random.Random(f"{seed}:{session_id}:cancel")
        for turn in range(per_session[index]):
            text = f"{session_id}:{turn}"
            sent[session_id].append(text)
            request_id = f"req-{session_id}-{turn}"
            task = asyncio.ensure_future(session.chat(text, request_id=request_id))
            canceller = None
            if rng.random() < CANCEL_SHARE:
                canceller = asyncio.ensure_future(
                    cancel_when_streaming(session, request_id, task, rng.uniform(0, 0.005))
                )
            result = await task
            if canceller is not None:
                await canceller
            statuses[result.status] += 1

    report = Report(turns=turns, statuses=statuses)
    try:
        await asyncio.gather(*(run_session(i) for i in range(sessions)))
        still_open = sum(1 for r in responses if not r.is_closed)
        if still_open:
            report.problems.append(f"{still_open} provider response(s) left open")
    finally:
        for agent in agents:
            await agent.aclose()
        await client.aclose()
        for _ in range(500):  # the server notices the clients' hang-ups asynchronously
            if server.open_connections == 0:
                break
            await asyncio.sleep(0.01)
        if server.open_connections:
            report.problems.append(f"{server.open_connections} connection(s) still open on the server")
        await server.close()

    report.faults = dict(provider.faults)
    report.retries = sum(n - 1 for n in provider.attempts.values())
    report.tool_executions = sum(executions.values())
    report.double_executions = sum(1 for n in executions.values() if n > 1)

    await audit_store(db, sent, executions, provider.issued_calls, report)
    await report_leaked_tasks(baseline, report)
    return report


def check(report: Report, turns: int) -> None:
    assert not report.problems, "\n".join(report.problems)
    assert sum(report.statuses.values()) == turns
    assert set(report.statuses) <= {"completed", "error", "aborted"}, report.statuses
    assert report.lost == 0 and report.duplicated == 0 and report.double_executions == 0
    # The fault mix was actually exercised (the seed is fixed, so this is deterministic).
    assert report.statuses["completed"] > 0 and report.statuses["error"] > 0 and report.retries > 0
    assert report.tool_executions > 0
    assert len(report.faults) == len(FAULTS)


async def test_reliability_under_injected_faults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = await run_reliability(TURNS, SEED, tmp_path / "think.db")
    with capsys.disabled():
        print("\n" + report.line())
    check(report, TURNS)


@pytest.mark.slow
async def test_reliability_long_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = await run_reliability(LONG_TURNS, SEED + 1, tmp_path / "think.db", sessions=40)
    with capsys.disabled():
        print("\n" + report.line())
    check(report, LONG_TURNS)
