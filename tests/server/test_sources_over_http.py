"""An answer's sources and generated files over the AI SDK's HTTP chat (real uvicorn server,
httpx, a SQLite file, providers on the loopback server): streamed as ``source-url`` / ``file``
chunks, stored as parts (``GET /api/sessions/{id}/messages``), replayed when the same message
comes again, in a stream resumed mid-answer, and sent back in a client's transcript for the
next turn."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.loopback import LoopbackServer, Reply
from tests.support import cited
from tests.support.agents import make_agent
from tests.support.cited import LAB, NEWS, PNG_1X1, GatedModel
from tests.support.http_chat import api, check_chunk, post_chat, transport_body
from tests.support.responses import responses_model
from tests.support.web import roles, user
from tests.support.wire import anthropic_model

TIMEOUT = 30.0
CONTENT = ("source-url", "source-document", "file")


def content_of(chunks_or_parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in chunks_or_parts if c["type"] in CONTENT]


async def test_sources_are_stored_listed_and_replayed(tmp_path: Path, loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.anthropic_web_search()))
    agent = make_agent(anthropic_model(loopback), store=str(tmp_path / "chats.db"))
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("c", [user("What is new?", "u1")]))
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
        _, again = await post_chat(http, transport_body("c", [user("What is new?", "u1")]))
    sources = content_of(first)
    assert [(c["type"], c["url"], c["title"]) for c in sources] == [("source-url", *NEWS), ("source-url", *LAB)]
    assert roles(history) == [("user", "u1"), ("assistant", first[0]["messageId"])]
    assert content_of(history[1]["parts"]) == sources  # stored as the client built them
    assert content_of(again) == sources  # the answer replayed, not asked again
    assert len(loopback.requests) == 1


async def test_a_generated_image_is_stored_and_the_clients_transcript_with_it_is_taken(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    loopback.enqueue(Reply.sse(cited.responses_image()), Reply.sse(cited.responses_web_search()))
    agent = make_agent(responses_model(loopback), store=str(tmp_path / "chats.db"))
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("c", [user("Draw a pixel", "u1")]))
        [history_user, answer] = (await http.get("/api/sessions/c/messages")).json()["messages"]
        # What useChat sends next: its whole transcript, the answer with its file part included.
        _, second = await post_chat(http, transport_body("c", [history_user, answer, user("What is new?", "u2")]))
        history = (await http.get("/api/sessions/c/messages")).json()["messages"]
    image = {"type": "file", "mediaType": "image/png", "url": f"data:image/png;base64,{PNG_1X1}",
             "providerMetadata": {"openai": {"itemId": "ig_1"}}}
    assert content_of(first) == content_of(answer["parts"]) == [image]
    assert [c["url"] for c in content_of(second)] == [NEWS[0], LAB[0]]
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert content_of(history[1]["parts"]) == [image]  # the earlier answer kept its image
    # The model's next request held the earlier answer's text, not its image.
    assert "data:image/png" not in json.dumps(loopback.requests[1].json)


async def sse_chunks(lines: AsyncIterator[str], until: str | None = None) -> list[dict[str, Any]]:
    """The chunks of an SSE stream, up to the first of type ``until`` (or the end)."""
    chunks: list[dict[str, Any]] = []
    async for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunks.append(json.loads(line[len("data: "):]))
        check_chunk(chunks[-1])
        if chunks[-1]["type"] == until:
            break
    return chunks


async def test_a_stream_resumed_mid_answer_shows_the_sources_already_cited(tmp_path: Path, loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.anthropic_web_search()))
    model = GatedModel(anthropic_model(loopback))
    agent = make_agent(model, store=str(tmp_path / "chats.db"))
    async with api(agent) as http:
        body = transport_body("c", [user("What is new?", "u1")])
        async with http.stream("POST", "/api/chat", json=body) as posted:
            lines = posted.aiter_lines()
            live = await sse_chunks(lines, until="source-url")
            await asyncio.wait_for(model.cited.wait(), TIMEOUT)
            # A page reloaded now: its history, then the running stream from its first chunk.
            async with http.stream("GET", "/api/chat/c/stream") as resumed:
                assert resumed.status_code == 200
                replay_lines = resumed.aiter_lines()
                replayed = await sse_chunks(replay_lines, until="source-url")
                model.go.set()
                replayed += await sse_chunks(replay_lines)
            live += await sse_chunks(lines)
        stored = (await http.get("/api/sessions/c/messages")).json()["messages"][1]
    assert replayed == live
    assert [c["url"] for c in content_of(replayed)] == [NEWS[0], LAB[0]]
    assert content_of(stored["parts"]) == content_of(live)
