"""What an answer cites and the files a model generates, from each provider's real stream
(loopback server): ``on_chunk`` sees them as events, ``StepResult.sources`` / ``files`` list
them, the UI stream carries them as the AI SDK's ``source-url`` / ``source-document`` / ``file``
chunks, and the stored answer keeps them as parts of the same shape."""

from __future__ import annotations

from binascii import a2b_base64
from typing import Any

from tests.loopback import LoopbackServer, Reply
from tests.support import cited
from tests.support.agents import make_agent
from tests.support.cited import LAB, NEWS, PNG_1X1
from tests.support.gemini import gemini_model
from tests.support.http_chat import check_chunk
from tests.support.responses import responses_model
from tests.support.wire import anthropic_model
from think_core import hookimpl
from think_core.events import DocumentSource, GeneratedFile, UrlSource
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
    chunks = [chunk async for chunk in session.stream("What is new in quantum computing?")]
    for chunk in chunks:
        check_chunk(chunk)  # the AI SDK's UIMessageChunk shapes, strictly
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
