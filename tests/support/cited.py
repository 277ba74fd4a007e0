"""Answers that cite sources or carry generated files, as each provider streams them: Claude
with web search and with document citations (``citations_delta``), the Responses API with web
search (``url_citation`` annotations) and its image generation tool, a Chat Completions search
model (a delta's ``annotations``), Gemini grounded on Google
Search (``groundingMetadata``) and Gemini's image output (``inlineData``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from tests.loopback import sse_body
from tests.support.gemini import chunk, crlf_stream
from tests.support.responses import completed, created, named
from tests.support.wire import oa_chunk, oa_events, oa_usage
from think_core.models.base import ModelRequest

#: A real 1×1 PNG, base64 as the providers send generated images.
PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

#: The pages the web search answers below cite: (url, title).
NEWS = ("https://example.com/quantum", "Quantum Computing Breakthroughs in 2025")
LAB = ("https://lab.example.org/error-correction", "Error correction milestone")


def _an_start(model: str = "claude-sonnet-4-5") -> dict[str, Any]:
    return {"type": "message_start", "message": {
        "id": "msg_cited", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 2679, "output_tokens": 3}}}


def _an_text_block(index: int, *pieces: str | dict[str, Any]) -> list[dict[str, Any]]:
    """A text block: strings are text deltas, dicts citations (``citations_delta``) before them."""
    events: list[dict[str, Any]] = [
        {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}]
    for piece in pieces:
        delta = ({"type": "text_delta", "text": piece} if isinstance(piece, str)
                 else {"type": "citations_delta", "citation": piece})
        events.append({"type": "content_block_delta", "index": index, "delta": delta})
    events.append({"type": "content_block_stop", "index": index})
    return events


def _web_citation(page: tuple[str, str], cited: str) -> dict[str, Any]:
    url, title = page
    return {"type": "web_search_result_location", "cited_text": cited, "url": url, "title": title,
            "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm"}


def anthropic_web_search(call: tuple[str, str, dict[str, Any]] | None = None) -> str:
    """Claude searching the web (a server tool: its call and results are blocks of the answer)
    and citing two pages, the first one twice; then, given ``call`` (id, name, input), calling
    that tool of the turn's."""
    tool_use: list[dict[str, Any]] = []
    if call is not None:
        call_id, name, arguments = call
        tool_use = [
            {"type": "content_block_start", "index": 5,
             "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}},
            {"type": "content_block_delta", "index": 5,
             "delta": {"type": "input_json_delta", "partial_json": json.dumps(arguments)}},
            {"type": "content_block_stop", "index": 5},
        ]
    return sse_body(
        _an_start(),
        *_an_text_block(0, "I'll search for that."),
        {"type": "content_block_start", "index": 1, "content_block": {
            "type": "server_tool_use", "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB", "name": "web_search", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {
            "type": "input_json_delta", "partial_json": json.dumps({"query": "quantum computing 2025"})}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {
            "type": "web_search_tool_result", "tool_use_id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
            "content": [{"type": "web_search_result", "title": t, "url": u, "encrypted_content": "EqgfCioIARgB",
                         "page_age": "April 30, 2025"} for u, t in (NEWS, LAB)]}},
        {"type": "content_block_stop", "index": 2},
        *_an_text_block(3, _web_citation(NEWS, "Logical qubits ran for an hour."), "Logical qubits now run for hours"),
        *_an_text_block(4, _web_citation(LAB, "Below threshold."), " and error rates fell below threshold",
                        _web_citation(NEWS, "A second claim."), "."),
        *tool_use,
        {"type": "message_delta", "delta": {"stop_reason": "tool_use" if call else "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 510, "server_tool_use": {"web_search_requests": 1}}},
        {"type": "message_stop"},
        event_names=True,
    )


def anthropic_document_citations() -> str:
    """Claude citing two documents of the prompt: a plain-text one and a PDF."""
    return sse_body(
        _an_start(),
        *_an_text_block(0, {"type": "char_location", "cited_text": "The grass is green.", "document_index": 0,
                            "document_title": "Garden notes", "start_char_index": 0, "end_char_index": 20},
                        "The grass is green",
                        {"type": "page_location", "cited_text": "Skies are blue.", "document_index": 1,
                         "document_title": None, "start_page_number": 2, "end_page_number": 3},
                        " and the sky is blue."),
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 40}},
        {"type": "message_stop"},
        event_names=True,
    )


def responses_web_search() -> str:
    """The Responses API with its web search tool: the search item, then a message whose text
    carries ``url_citation`` annotations (announced by ``response.output_text.annotation.added``)."""
    text = "Logical qubits now run for hours (example.com) and error rates fell (lab.example.org)."
    annotations = [
        {"type": "url_citation", "start_index": text.index(mark), "end_index": text.index(mark) + len(mark),
         "url": url, "title": title}
        for mark, (url, title) in (("(example.com)", NEWS), ("(lab.example.org)", LAB))
    ]
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed",
              "action": {"type": "search", "query": "quantum computing 2025"}}
    message = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": annotations, "logprobs": []}]}
    at = {"item_id": "msg_1", "output_index": 1, "content_index": 0}
    split = annotations[0]["end_index"]  # the first annotation arrives right after the text it annotates
    return named(
        created(),
        {"type": "response.output_item.added", "output_index": 0, "item": {**search, "status": "in_progress"}},
        {"type": "response.web_search_call.in_progress", "output_index": 0, "item_id": "ws_1"},
        {"type": "response.web_search_call.searching", "output_index": 0, "item_id": "ws_1"},
        {"type": "response.web_search_call.completed", "output_index": 0, "item_id": "ws_1"},
        {"type": "response.output_item.done", "output_index": 0, "item": search},
        {"type": "response.output_item.added", "output_index": 1,
         "item": {**message, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", **at, "part": {"type": "output_text", "text": "", "annotations": []}},
        {"type": "response.output_text.delta", **at, "delta": text[:split], "logprobs": []},
        {"type": "response.output_text.annotation.added", **at, "annotation_index": 0, "annotation": annotations[0]},
        {"type": "response.output_text.delta", **at, "delta": text[split:], "logprobs": []},
        {"type": "response.output_text.annotation.added", **at, "annotation_index": 1, "annotation": annotations[1]},
        {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": message["content"][0]},
        {"type": "response.output_item.done", "output_index": 1, "item": message},
        completed(30, 25),
    )


def responses_image() -> str:
    """The Responses API's image generation tool: a partial image, then the finished item."""
    item = {"id": "ig_1", "type": "image_generation_call", "status": "completed", "result": PNG_1X1,
            "output_format": "png", "background": "opaque", "quality": "low", "size": "1024x1024",
            "revised_prompt": "A single pixel"}
    return named(
        created(),
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": "ig_1", "type": "image_generation_call", "status": "in_progress"}},
        {"type": "response.image_generation_call.in_progress", "output_index": 0, "item_id": "ig_1"},
        {"type": "response.image_generation_call.generating", "output_index": 0, "item_id": "ig_1"},
        {"type": "response.image_generation_call.partial_image", "output_index": 0, "item_id": "ig_1",
         "partial_image_index": 0, "partial_image_b64": PNG_1X1},
        {"type": "response.image_generation_call.completed", "output_index": 0, "item_id": "ig_1"},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        completed(20, 1500),
    )


def gemini_grounded() -> str:
    """Gemini grounded on Google Search: the text, then the last chunk's ``groundingMetadata``
    (two web chunks and the supports that tie text to them)."""
    last = chunk({"text": " and error rates fell."}, finish="STOP", usage=(12, 20, 0))
    last["candidates"][0]["groundingMetadata"] = {
        "webSearchQueries": ["quantum computing 2025"],
        "searchEntryPoint": {"renderedContent": "<style>.container{}</style><div class=\"container\"></div>"},
        "groundingChunks": [{"web": {"uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9",
                                     "title": "example.com"}},
                            {"web": {"uri": LAB[0], "title": "lab.example.org"}}],
        "groundingSupports": [{"segment": {"startIndex": 0, "endIndex": 32, "text": "Logical qubits now run for hours"},
                               "groundingChunkIndices": [0], "confidenceScores": [0.92]},
                              {"segment": {"startIndex": 33, "endIndex": 54, "text": "and error rates fell."},
                               "groundingChunkIndices": [1], "confidenceScores": [0.81]}],
    }
    return crlf_stream(chunk({"text": "Logical qubits now run for hours"}), last)


def gemini_image() -> str:
    """A Gemini image model's answer: text, then the image as an ``inlineData`` part."""
    return crlf_stream(
        chunk({"text": "Here is your pixel."}),
        chunk({"inlineData": {"mimeType": "image/png", "data": PNG_1X1}, "thoughtSignature": "c2lnbmVk"},
              finish="STOP", usage=(8, 1290, 0)),
    )


def openai_search_answer() -> str:
    """A Chat Completions search model (``gpt-4o-search-preview``): the text, then a delta with its
    ``url_citation`` annotations."""
    text = "Logical qubits now run for hours ([example.com](https://example.com/quantum))."
    start = text.index("([")
    annotations = [{"type": "url_citation", "url_citation": {
        "url": NEWS[0], "title": NEWS[1], "start_index": start, "end_index": len(text) - 1}}]
    return sse_body(
        *oa_events(text[:20], text[20:]),
        oa_chunk({"annotations": annotations}),
        oa_chunk({}, "stop"),
        oa_usage(15, 30),
        done=True,
    )


class GatedModel:
    """A provider model whose stream waits, after its first event of type ``after`` (``source``,
    ``file``), until ``go`` is set: a test acts while the answer is half-way, whatever the
    machine's speed."""

    def __init__(self, model: Any, after: str = "source") -> None:
        self.model = model
        self.model_id = model.model_id
        self.provider = model.provider
        self.after = after
        self.cited = asyncio.Event()
        self.go = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        async with aclosing(self.model.stream(request)) as events:
            async for event in events:
                yield event
                if event.type == self.after and not self.cited.is_set():
                    self.cited.set()
                    await self.go.wait()
