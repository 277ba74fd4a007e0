"""The four wire formats side by side, for the tests of files (issue 29): each provider's model on
a loopback server, its answer and its tool call as it streams them, and where its request
keeps the user messages and the tool results; a PNG and a PDF as a browser encodes them."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.loopback import LoopbackServer
from tests.support.gemini import chunk, crlf_stream, gemini_model
from tests.support.responses import call_events, completed, created, named, responses_model, text_stream
from tests.support.wire import an_stream, anthropic_model, oa_text, oa_tool_call, openai_model

# A 1x1 PNG and a minimal PDF, base64 as a browser's FileReader encodes them.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n").decode()
PNG_URL = f"data:image/png;base64,{PNG}"
PDF_URL = f"data:application/pdf;base64,{PDF}"


@dataclass(frozen=True)
class Provider:
    """One provider: its model on the loopback server, an answer and a tool call (no arguments)
    as it streams them, and where its request body keeps the user messages' content."""

    name: str
    model: Callable[[LoopbackServer], Any]
    answer: Callable[[str], str]
    tool_call: Callable[[str, str], str]
    user_contents: Callable[[dict[str, Any]], list[Any]]


def _chat_users(body: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def _responses_users(body: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in body["input"] if m.get("role") == "user"]


def _gemini_users(body: dict[str, Any]) -> list[Any]:
    return [c["parts"] for c in body["contents"] if c["role"] == "user"]


def _an_answer(text: str) -> str:
    return an_stream({"type": "text", "text": text}, stop="end_turn", input_tokens=9, output_tokens=3)


def _an_call(call_id: str, name: str) -> str:
    return an_stream({"type": "tool_use", "id": call_id, "name": name, "input": {}}, stop="tool_use",
                     input_tokens=9, output_tokens=3)


def _responses_call(call_id: str, name: str) -> str:
    return named(created(), *call_events(0, call_id, name, "{}"), completed(9, 3))


def _gemini_answer(text: str) -> str:
    return crlf_stream(chunk({"text": text}, finish="STOP", usage=(9, 3, 0)))


def _gemini_call(call_id: str, name: str) -> str:
    return crlf_stream(chunk({"functionCall": {"id": call_id, "name": name, "args": {}}}, finish="STOP",
                             usage=(9, 3, 0)))


OPENAI = Provider("openai", openai_model, lambda text: oa_text(text),
                  lambda call_id, name: oa_tool_call(call_id, name, "{}"), _chat_users)
RESPONSES = Provider("responses", responses_model, lambda text: text_stream(text), _responses_call, _responses_users)
ANTHROPIC = Provider("anthropic", anthropic_model, _an_answer, _an_call, _chat_users)
GEMINI = Provider("gemini", gemini_model, _gemini_answer, _gemini_call, _gemini_users)
PROVIDERS = [OPENAI, RESPONSES, ANTHROPIC, GEMINI]
