"""``redact`` through ``think serve`` with real clients: the model's answer streams four
characters at a time from a loopback OpenAI server, and no phone number reaches the HTTP
stream, a stream resumed mid-answer, a WebSocket client or the stored history; a server
SIGKILLed mid-answer and started again answers the chat redacted, and the database holds no
unredacted byte (journal and stream log included)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import httpx

from tests.loopback import LoopbackServer, RecordedRequest, Reply
from tests.support.http_chat import api, parse_sse, transport_body
from tests.support.serve import think_serve
from tests.support.web import chat_request, user
from tests.support.wire import oa_text, openai_model
from tests.support.ws import client, serve
from think_core.agent import Think
from think_core.server.testing import wait_until_healthy
from think_plugins.redact import Redact

PHONES = ("555-0123", "555-0199")
ANSWER = "You can call 555-0123 any day, or 555-0199 after six. Bye."
REDACTED = "You can call [redacted] any day, or [redacted] after six. Bye."
DEADLINE = 60  # seconds; nothing here is timed


def in_fours(text: str) -> list[str]:
    return [text[i:i + 4] for i in range(0, len(text), 4)]


def slow_answer(request: RecordedRequest) -> Reply:
    return Reply.sse(oa_text(*in_fours(ANSWER)), chunk_delay=0.05)


def redacting_agent(provider: LoopbackServer) -> Think:
    return Think(openai_model(provider), plugins=[Redact({"patterns": [r"\d{3}-\d{4}"]})], load_entrypoints=False)


def assert_clean(*texts: str) -> None:
    for text in texts:
        for phone in PHONES:
            assert phone not in text


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


async def test_http_a_resumed_stream_and_the_history_are_redacted() -> None:
    async with LoopbackServer(handler=slow_answer) as provider, api(redacting_agent(provider)) as http:
        body = transport_body("s1", [user("How do I reach you?", "u1")])
        first_word = asyncio.get_running_loop().create_future()

        async def chat() -> str:
            parts = []
            async with http.stream("POST", "/api/chat", json=body, timeout=DEADLINE) as response:
                async for text in response.aiter_text():
                    parts.append(text)
                    if '"text-delta"' in text and not first_word.done():
                        first_word.set_result(None)
            return "".join(parts)

        chatting = asyncio.create_task(chat())
        await asyncio.wait_for(first_word, DEADLINE)
        resumed = await http.get("/api/chat/s1/stream", timeout=DEADLINE)  # a reloaded page, mid-answer
        direct = await chatting
        history = (await http.get("/api/sessions/s1/messages")).json()["messages"]
    assert resumed.status_code == 200
    assert text_of(parse_sse(direct)) == text_of(parse_sse(resumed.text)) == REDACTED
    assert "".join(p.get("text", "") for p in history[-1]["parts"]) == REDACTED
    assert_clean(direct, resumed.text, json.dumps(history))


async def test_a_websocket_client_sees_only_the_redacted_answer() -> None:
    async with LoopbackServer(handler=slow_answer) as provider, serve(redacting_agent(provider)) as base:
        async with client(base, "s1") as ws:
            await ws.recv()  # the (empty) history
            await ws.send(chat_request("r1", [user("How do I reach you?", "u1")]))
            chunks, frames = await ws.stream("r1")
            transcript = await ws.snapshot()
    assert text_of(chunks) == REDACTED
    assert_clean(json.dumps(frames), json.dumps(transcript))


async def test_a_redacted_answer_cut_off_by_sigkill_is_redacted_after_the_restart(db: str, tmp_path: Path) -> None:
    config = tmp_path / "think.toml"
    config.write_text('[plugins.redact]\npatterns = ["\\\\d{3}-\\\\d{4}"]\n')
    async with LoopbackServer(handler=slow_answer) as provider:
        args = ("--model", f"openai-compatible:m@{provider.url}/v1", "--db", db, "--plugins", "redact",
                "--config", str(config))
        async with think_serve(*args, deadline=DEADLINE) as (proc, base):
            async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
                await wait_until_healthy(http, timeout=DEADLINE)
                body = transport_body("crash", [user("How do I reach you?", "u1")])
                seen: list[str] = []
                async with http.stream("POST", "/api/chat", json=body) as response:
                    async for text in response.aiter_text():
                        seen.append(text)
                        if "[redacted]" in "".join(seen):  # past the first phone number: kill it here
                            break
                proc.send_signal(signal.SIGKILL)
                assert await proc.wait() == -signal.SIGKILL
        assert_clean("".join(seen))

        async with think_serve(*args, deadline=DEADLINE) as (_, base):
            async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as http:
                await wait_until_healthy(http, timeout=DEADLINE)
                loop = asyncio.get_running_loop()
                deadline = loop.time() + DEADLINE
                while True:
                    rows = (await http.get("/api/sessions/crash/submissions")).json()["submissions"]
                    if rows and all(r["status"] not in ("pending", "running") for r in rows):
                        break
                    assert loop.time() < deadline, rows
                    await asyncio.sleep(0.2)
                history = (await http.get("/api/sessions/crash/messages")).json()["messages"]
                replay = await http.get("/api/chat/crash/stream")
    assert [r["status"] for r in rows] == ["completed"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert "".join(p.get("text", "") for p in history[-1]["parts"]) == REDACTED
    assert_clean(json.dumps(history), replay.text)
    if not db.startswith("postgres"):  # every byte the store wrote: journal, stream log, history
        stored = b"".join(p.read_bytes() for p in Path(db).parent.glob(Path(db).name + "*"))
        assert b"[redacted]" in stored
        for phone in PHONES:
            assert phone.encode() not in stored
