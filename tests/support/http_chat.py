"""The AI SDK's HTTP chat as the server tests speak it: a server and an HTTP client on it
(``api``), the body ``DefaultChatTransport`` posts (``transport_body``), and its SSE stream read
back with every chunk checked against the AI SDK's ``UIMessageChunk`` shapes (``parse_sse``,
``post_chat``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from think_core.agent import Think
from think_core.server import create_app
from think_core.server.testing import running_server

# type → (required fields, optional fields), besides "type" (AI SDK UIMessageChunk, strict).
_TOOL_OPT = {"providerExecuted", "providerMetadata", "dynamic", "title"}
CHUNK_SHAPES: dict[str, tuple[set[str], set[str]]] = {
    "start": (set(), {"messageId", "messageMetadata"}),
    "finish": (set(), {"finishReason", "messageMetadata"}),
    "start-step": (set(), set()),
    "finish-step": (set(), set()),
    "abort": (set(), {"reason"}),
    "error": ({"errorText"}, set()),
    "message-metadata": ({"messageMetadata"}, set()),
    "text-start": ({"id"}, {"providerMetadata"}),
    "text-delta": ({"id", "delta"}, {"providerMetadata"}),
    "text-end": ({"id"}, {"providerMetadata"}),
    "reasoning-start": ({"id"}, {"providerMetadata"}),
    "reasoning-delta": ({"id", "delta"}, {"providerMetadata"}),
    "reasoning-end": ({"id"}, {"providerMetadata"}),
    "tool-input-start": ({"toolCallId", "toolName"}, _TOOL_OPT),
    "tool-input-delta": ({"toolCallId", "inputTextDelta"}, set()),
    "tool-input-available": ({"toolCallId", "toolName", "input"}, _TOOL_OPT),
    "tool-output-available": ({"toolCallId", "output"}, {"providerExecuted", "dynamic", "preliminary"}),
    "tool-output-error": ({"toolCallId", "errorText"}, {"providerExecuted", "dynamic"}),
    "tool-output-denied": ({"toolCallId"}, set()),
    "tool-approval-request": ({"approvalId", "toolCallId"}, {"reason"}),
    "source-url": ({"sourceId", "url"}, {"title", "providerMetadata"}),
    "source-document": ({"sourceId", "mediaType", "title"}, {"filename", "providerMetadata"}),
    "file": ({"url", "mediaType"}, {"providerMetadata"}),
}


def check_chunk(chunk: dict[str, Any]) -> None:
    kind = chunk.get("type")
    assert isinstance(kind, str), chunk
    if kind.startswith("data-"):
        required, optional = {"data"}, {"id", "transient"}
    else:
        assert kind in CHUNK_SHAPES, f"not an AI SDK UI message chunk type: {kind!r}"
        required, optional = CHUNK_SHAPES[kind]
    fields = set(chunk) - {"type"}
    assert required <= fields, f"{kind} lacks {required - fields}"
    assert fields <= required | optional, f"{kind} has unknown fields {fields - required - optional}"


@asynccontextmanager
async def api(agent: Think, **app_kwargs: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with running_server(create_app(agent, **app_kwargs)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
            yield http


def transport_body(chat_id: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """What the AI SDK DefaultChatTransport posts: custom body fields, then id, messages,
    trigger (``messageId`` is undefined for a submit, so JSON.stringify omits it)."""
    return {**extra, "id": chat_id, "messages": messages, "trigger": "submit-message"}


def parse_sse(raw: str) -> list[dict[str, Any]]:
    """The chunks of an SSE body, checking the framing and the final ``[DONE]``."""
    assert raw.endswith("\n\n"), repr(raw[-40:])
    events = raw[:-2].split("\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in events), events
    assert events[-1] == "data: [DONE]"
    assert events.count("data: [DONE]") == 1
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    for chunk in chunks:
        check_chunk(chunk)
    return chunks


async def post_chat(http: httpx.AsyncClient, body: dict[str, Any]) -> tuple[httpx.Response, list[dict[str, Any]]]:
    response = await http.post("/api/chat", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["cache-control"] == "no-cache"
    return response, parse_sse(response.text)
