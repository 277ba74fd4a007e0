"""What an answer cites and the files a model generates, from each provider's real stream
(loopback server): ``on_chunk`` sees them as events, ``StepResult.sources`` / ``files`` list
them, the UI stream carries them as the AI SDK's ``source-url`` / ``source-document`` / ``file``
chunks, and the stored answer keeps them as parts of the same shape."""

from __future__ import annotations

from base64 import b64encode
from binascii import a2b_base64
from typing import Any

import pytest
from pydantic import ValidationError

from tests.loopback import LoopbackServer, Reply, sse_body
from tests.support import cited
from tests.support.agents import make_agent
from tests.support.cited import LAB, NEWS, PNG_1X1
from tests.support.gemini import chunk, crlf_stream, gemini_model
from tests.support.http_chat import check_chunk
from tests.support.responses import responses_model
from tests.support.wire import anthropic_model, ask, collect, openai_model
from think_core import ScriptedModel, Step, hookimpl
from think_core.events import DocumentSource, GeneratedFile, UrlSource
from think_core.models.sources import (
    anthropic_citation_source,
    chat_annotation_sources,
    gemini_grounding_sources,
    gemini_inline_file,
    responses_annotation_source,
    responses_image_file,
)
from think_core.types import ChunkContext, StepResult, UIMessage

CONTENT = ("source-url", "source-document", "file")


class Seen:
    """The step records and the source / file events a turn showed its plugins."""

    def __init__(self) -> None:
        self.steps: list[StepResult] = []
        self.events: list[Any] = []

    @hookimpl
    def on_step_finish(self, ctx: StepResult) -> None:
        self.steps.append(ctx)

    @hookimpl
    def on_chunk(self, ctx: ChunkContext) -> None:
        if ctx.chunk.type in ("source", "file"):
            self.events.append(ctx.chunk)


async def answer(model: Any) -> tuple[Seen, list[dict[str, Any]], UIMessage]:
    """One streamed turn: what the plugins saw, the UI chunks, the stored answer."""
    seen = Seen()
    session = make_agent(model, store=":memory:", plugins=[seen]).session("s")
    chunks = [c async for c in session.stream("What is new in quantum computing?")]
    for c in chunks:
        check_chunk(c)  # the AI SDK's UIMessageChunk shapes, strictly
    [_, stored] = await session.messages()
    return seen, chunks, stored


def content_of(chunks_or_parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in chunks_or_parts if c["type"] in CONTENT]


def urls(sources: list[Any]) -> list[tuple[str, str | None]]:
    return [(s.url, s.title) for s in sources]


async def test_claude_web_search_citations_are_url_sources_each_listed_once(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.anthropic_web_search()))
    seen, chunks, stored = await answer(anthropic_model(loopback))
    [step] = seen.steps
    assert step.text == "I'll search for that.Logical qubits now run for hours and error rates fell below threshold."
    # Every citation reaches on_chunk; the step lists each page once, where it was first cited.
    assert urls(seen.events) == [NEWS, LAB, NEWS]
    assert all(isinstance(s, UrlSource) for s in step.sources) and urls(step.sources) == [NEWS, LAB]
    assert step.sources[0].provider_metadata == {
        "anthropic": {"citedText": "Logical qubits ran for an hour.", "encryptedIndex": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm"}}
    assert len({s.id for s in step.sources}) == 2
    expected = [
        {"type": "source-url", "sourceId": s.id, "url": s.url, "title": s.title, "providerMetadata": s.provider_metadata}
        for s in step.sources
    ]
    assert content_of(chunks) == expected
    assert content_of(stored.parts) == expected
    assert stored.text == step.text  # the citations did not cut the text


async def test_claude_document_citations_are_document_sources(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.anthropic_document_citations()))
    seen, chunks, stored = await answer(anthropic_model(loopback))
    [step] = seen.steps
    assert [(type(s), s.media_type, s.title, s.filename) for s in step.sources] == [
        (DocumentSource, "text/plain", "Garden notes", None),
        (DocumentSource, "application/pdf", "Document 2", None),  # an untitled document, by its place
    ]
    assert step.sources[1].provider_metadata == {
        "anthropic": {"citedText": "Skies are blue.", "documentIndex": 1, "startPageNumber": 2, "endPageNumber": 3}}
    assert content_of(chunks) == content_of(stored.parts) == [
        {"type": "source-document", "sourceId": step.sources[0].id, "mediaType": "text/plain", "title": "Garden notes",
         "providerMetadata": step.sources[0].provider_metadata},
        {"type": "source-document", "sourceId": step.sources[1].id, "mediaType": "application/pdf",
         "title": "Document 2", "providerMetadata": step.sources[1].provider_metadata},
    ]
    assert step.text == "The grass is green and the sky is blue."


async def test_responses_url_citations_are_url_sources(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.responses_web_search()))
    seen, chunks, stored = await answer(responses_model(loopback))
    [step] = seen.steps
    assert urls(step.sources) == [NEWS, LAB]
    assert step.sources[1].provider_metadata == {"openai": {"startIndex": 68, "endIndex": 85}}
    assert [c["url"] for c in content_of(chunks)] == [c["url"] for c in content_of(stored.parts)] == [NEWS[0], LAB[0]]
    # Each source chunk comes where its annotation did: after the text it annotates.
    first = chunks.index(content_of(chunks)[0])
    assert "".join(c.get("delta", "") for c in chunks[:first]).endswith("(example.com)")
    assert step.text.endswith("(lab.example.org).")


async def test_chat_completions_url_citations_are_url_sources(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.openai_search_answer()))
    seen, chunks, stored = await answer(openai_model(loopback))
    [step] = seen.steps
    assert urls(step.sources) == [NEWS] and step.text.endswith("(https://example.com/quantum)).")
    assert content_of(chunks) == content_of(stored.parts) == [
        {"type": "source-url", "sourceId": step.sources[0].id, "url": NEWS[0], "title": NEWS[1],
         "providerMetadata": step.sources[0].provider_metadata}]
    assert chat_annotation_sources([{"type": "url_citation"}, "junk", {"type": "other"}]) == []


async def test_gemini_grounding_chunks_are_url_sources(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.gemini_grounded()))
    seen, chunks, stored = await answer(gemini_model(loopback))
    [step] = seen.steps
    assert urls(step.sources) == [
        ("https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9", "example.com"),
        (LAB[0], "lab.example.org"),
    ]
    assert content_of(chunks) == content_of(stored.parts) == [
        {"type": "source-url", "sourceId": s.id, "url": s.url, "title": s.title} for s in step.sources
    ]
    assert step.text == "Logical qubits now run for hours and error rates fell."


async def test_a_responses_generated_image_is_a_file(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.responses_image()))
    seen, chunks, stored = await answer(responses_model(loopback))
    [step] = seen.steps
    [image] = step.files
    assert isinstance(image, GeneratedFile) and image.media_type == "image/png" and image.base64 == PNG_1X1
    assert image.data == a2b_base64(PNG_1X1) and image.data.startswith(b"\x89PNG")
    assert seen.events == [image] and step.sources == []
    part = {"type": "file", "mediaType": "image/png", "url": f"data:image/png;base64,{PNG_1X1}",
            "providerMetadata": {"openai": {"itemId": "ig_1"}}}
    assert content_of(chunks) == content_of(stored.parts) == [part]


async def test_a_gemini_inline_image_is_a_file_with_its_signature(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.gemini_image()))
    seen, chunks, stored = await answer(gemini_model(loopback, "gemini-2.5-flash-image"))
    [step] = seen.steps
    assert step.text == "Here is your pixel."
    assert step.files == [GeneratedFile("image/png", base64=PNG_1X1,
                                        provider_metadata={"google": {"thoughtSignature": "c2lnbmVk"}})]
    assert content_of(chunks) == content_of(stored.parts) == [
        {"type": "file", "mediaType": "image/png", "url": step.files[0].data_url,
         "providerMetadata": {"google": {"thoughtSignature": "c2lnbmVk"}}}]


async def test_a_cited_answer_is_history_the_next_turn_can_build_on(loopback: LoopbackServer) -> None:
    """The source and file parts of a stored answer are for people: the next request carries its
    text, not them, and is a valid request for the provider."""
    loopback.enqueue(Reply.sse(cited.anthropic_web_search()))
    loopback.enqueue(Reply.sse(cited.anthropic_document_citations()))
    session = make_agent(anthropic_model(loopback), store=":memory:").session("s")
    assert (await session.chat("What is new?")).status == "completed"
    second = await session.chat("And the garden?")
    assert second.status == "completed", second.error
    sent = loopback.requests[1].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert "source" not in str(sent[1]) and "Logical qubits now run for hours" in str(sent[1])


def test_citation_shapes_each_provider_documents() -> None:
    """The other citation kinds, and shapes that are no source (ignored, never an error)."""
    [block, result, unknown] = [anthropic_citation_source(c) for c in (
        {"type": "content_block_location", "cited_text": "x", "document_index": 2, "document_title": None,
         "start_block_index": 0, "end_block_index": 1},
        {"type": "search_result_location", "cited_text": "x", "source": "https://kb.example.com/a", "title": "A",
         "search_result_index": 0, "start_block_index": 0, "end_block_index": 0},
        {"type": "a_location_from_the_future", "cited_text": "x"},
    )]
    assert isinstance(block, DocumentSource) and (block.media_type, block.title) == ("text/plain", "Document 3")
    assert isinstance(result, UrlSource) and (result.url, result.title) == ("https://kb.example.com/a", "A")
    assert unknown is None and anthropic_citation_source(None) is None
    cited_file = responses_annotation_source({"type": "file_citation", "file_id": "file-1", "filename": "notes.pdf",
                                              "index": 3})
    assert isinstance(cited_file, DocumentSource) and (cited_file.title, cited_file.filename) == ("notes.pdf", "notes.pdf")
    assert responses_annotation_source({"type": "file_path", "file_id": "file-2", "index": 0}) is None
    assert responses_annotation_source({"type": "url_citation", "url": "", "title": "t"}) is None
    [web, stored] = gemini_grounding_sources({"groundingChunks": [
        {"web": {"uri": "https://example.com/a", "title": "example.com"}},
        {"retrievedContext": {"uri": "gs://bucket/report.pdf", "title": "Report", "text": "..."}},
        {"nothing": {}}, "junk",
    ]})
    assert isinstance(web, UrlSource) and isinstance(stored, DocumentSource)
    assert (stored.media_type, stored.title, stored.filename) == ("application/pdf", "Report", "report.pdf")
    assert gemini_grounding_sources({"webSearchQueries": ["q"]}) == [] and gemini_grounding_sources(None) == []


def test_generated_file_shapes() -> None:
    jpeg = b64encode(b"\xff\xd8\xff\xe0" + b"\0" * 12).decode()
    sniffed = responses_image_file({"id": "ig_2", "type": "image_generation_call", "status": "completed", "result": jpeg})
    assert sniffed is not None and sniffed.media_type == "image/jpeg"  # no output_format: named by its bytes
    named = responses_image_file({"type": "image_generation_call", "result": jpeg, "output_format": "webp"})
    assert named is not None and named.media_type == "image/webp"
    assert responses_image_file({"id": "ig_3", "type": "image_generation_call", "status": "failed", "result": None}) is None
    assert responses_image_file({"id": "ws_1", "type": "web_search_call"}) is None
    assert gemini_inline_file({"inlineData": {"mimeType": "image/png"}}) is None  # no data: nothing made
    linked = GeneratedFile("image/png", url="https://example.com/p.png")
    assert (linked.data, linked.data_url) == (b"", "https://example.com/p.png")
    with pytest.raises(ValueError, match="needs its base64 data or a url"):
        GeneratedFile("image/png")


async def test_a_thought_image_is_not_output_and_an_empty_citation_is_nothing(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(crlf_stream(
        chunk({"inlineData": {"mimeType": "image/png", "data": PNG_1X1}, "thought": True}),
        chunk({"text": "Drawn."}, finish="STOP", usage=(3, 2, 0)),
    )))
    events = await collect(gemini_model(loopback), ask())
    assert [e.type for e in events] == ["text-delta", "finish"]
    loopback.enqueue(Reply.sse(sse_body(
        {"type": "message_start", "message": {"id": "m", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": None}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
        {"type": "message_stop"},
        event_names=True,
    )))
    assert [e.type for e in await collect(anthropic_model(loopback), ask())] == ["text-delta", "finish"]


async def test_a_source_part_without_what_a_client_needs_is_refused() -> None:
    """Stored, it would be streamed on every replay as a chunk the AI SDK's clients refuse."""
    session = make_agent(ScriptedModel([]), store=":memory:").session("s")
    for part, missing in (({"type": "source-url", "sourceId": "src_1", "title": "t"}, "url"),
                          ({"type": "source-document", "sourceId": "src_2", "mediaType": "text/plain"}, "title")):
        with pytest.raises(ValidationError, match=f"needs a string '{missing}'"):
            await session.add_messages([{"id": "a1", "role": "assistant", "parts": [part]}])
    assert await session.messages() == []


async def test_a_scripted_step_cites_and_draws_for_offline_tests() -> None:
    """``Step(sources=..., files=...)``: a ported ``onStepFinish`` reading them is tested without a provider."""
    page, image = UrlSource("src_1", NEWS[0], NEWS[1]), GeneratedFile("image/png", base64=PNG_1X1)
    seen, chunks, stored = await answer(ScriptedModel([Step(text="Drawn from the news.", sources=[page], files=[image])]))
    [step] = seen.steps
    assert (step.sources, step.files, seen.events) == ([page], [image], [page, image])
    assert [c["type"] for c in content_of(chunks)] == [p["type"] for p in content_of(stored.parts)] == ["source-url", "file"]
