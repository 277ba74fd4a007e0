"""Files a user sends reach every provider in its own format (issue 29): an AI SDK ``file`` part
(a data URL or an https URL) becomes OpenAI Chat's ``image_url`` / ``file`` blocks, Responses'
``input_image`` / ``input_file``, Anthropic's ``image`` / ``document`` blocks and Gemini's
``inlineData`` / ``fileData`` parts, beside the text in the order sent, in the first turn and
again from the stored history in every later turn. A file a provider cannot take is an error
naming the type and the provider before any request, and the user message stays stored."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply
from tests.support.agents import make_agent
from tests.support.provider_files import (
    ANTHROPIC,
    GEMINI,
    OPENAI,
    PDF,
    PDF_URL,
    PNG,
    PNG_URL,
    PROVIDERS,
    RESPONSES,
    Provider,
)
from think_core.errors import UnsupportedContent
from think_core.messages import to_model_messages
from think_core.models.anthropic import AnthropicModel
from think_core.models.base import ModelRequest, UserMessage
from think_core.models.content import FilePart, TextPart, parse_data_url
from think_core.models.openai import OpenAIChatModel
from think_core.types import UIMessage

QUESTION = "What do these show?"


def attached(*files: dict[str, Any], text: str = QUESTION) -> UIMessage:
    """A user message as ``useChat`` sends one with attachments: the text, then the files."""
    return UIMessage(id="u1", role="user", parts=[{"type": "text", "text": text}, *files])


def png_part(url: str = PNG_URL) -> dict[str, Any]:
    return {"type": "file", "mediaType": "image/png", "filename": "dot.png", "url": url}


def pdf_part(url: str = PDF_URL) -> dict[str, Any]:
    return {"type": "file", "mediaType": "application/pdf", "filename": "doc.pdf", "url": url}


#: The exact blocks each provider gets for QUESTION, the PNG and the PDF (data URLs).
IMAGE_AND_PDF = {
    "openai": [{"type": "text", "text": QUESTION},
               {"type": "image_url", "image_url": {"url": PNG_URL}},
               {"type": "file", "file": {"filename": "doc.pdf", "file_data": PDF_URL}}],
    "responses": [{"type": "input_text", "text": QUESTION},
                  {"type": "input_image", "image_url": PNG_URL},
                  {"type": "input_file", "filename": "doc.pdf", "file_data": PDF_URL}],
    "anthropic": [{"type": "text", "text": QUESTION},
                  {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                  {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
                   "title": "doc.pdf"}],
    "gemini": [{"text": QUESTION},
               {"inlineData": {"mimeType": "image/png", "data": PNG}},
               {"inlineData": {"mimeType": "application/pdf", "data": PDF}}],
}


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
async def test_an_image_and_a_pdf_reach_the_provider_in_the_first_and_a_later_turn(
    provider: Provider, loopback: LoopbackServer, db: str
) -> None:
    loopback.enqueue(Reply.sse(provider.answer("A dot and a page.")), Reply.sse(provider.answer("Still a dot.")))
    agent = make_agent(provider.model(loopback), store=db)  # SQLite and PostgreSQL
    session = agent.session("s")
    first = await session.chat(attached(png_part(), pdf_part()))
    assert first.status == "completed" and first.text == "A dot and a page."
    assert provider.user_contents(loopback.requests[0].json) == [IMAGE_AND_PDF[provider.name]]

    # The stored message keeps the parts as sent, so the next turn's history sends them again.
    stored = (await session.messages())[0]
    assert stored.parts == attached(png_part(), pdf_part()).parts
    later = await session.chat("And now?")
    assert later.status == "completed"
    assert provider.user_contents(loopback.requests[1].json)[0] == IMAGE_AND_PDF[provider.name]
    second_user = provider.user_contents(loopback.requests[1].json)[1]
    assert second_user in ("And now?", [{"text": "And now?"}])  # a text-only message stays plain text


async def test_a_durable_submission_sends_the_files_too(loopback: LoopbackServer, db: str) -> None:
    loopback.enqueue(Reply.sse(ANTHROPIC.answer("A dot and a page.")))
    agent = make_agent(ANTHROPIC.model(loopback), store=db)
    session = agent.session("s")
    accepted = await session.submit_messages(attached(png_part(), pdf_part()))
    done = await session.wait_for_submission(accepted.submission_id, timeout=60)
    assert done.status == "completed"
    assert ANTHROPIC.user_contents(loopback.requests[0].json) == [IMAGE_AND_PDF["anthropic"]]


#: An image by https URL: each provider's URL form (the provider fetches it).
IMAGE_URL = "https://example.com/cat.png"
IMAGE_BY_URL = {
    "openai": {"type": "image_url", "image_url": {"url": IMAGE_URL}},
    "responses": {"type": "input_image", "image_url": IMAGE_URL},
    "anthropic": {"type": "image", "source": {"type": "url", "url": IMAGE_URL}},
    "gemini": {"fileData": {"mimeType": "image/png", "fileUri": IMAGE_URL}},
}


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
async def test_an_image_by_url_goes_as_a_url_and_the_parts_keep_their_order(
    provider: Provider, loopback: LoopbackServer
) -> None:
    loopback.enqueue(Reply.sse(provider.answer("A cat.")))
    agent = make_agent(provider.model(loopback), store=":memory:")
    message = UIMessage(id="u1", role="user", parts=[
        {"type": "file", "mediaType": "image/png", "url": IMAGE_URL},
        {"type": "text", "text": "Which animal?"},
        {"type": "file", "mediaType": "text/plain", "filename": "note.txt",
         "url": "data:text/plain;base64," + base64.b64encode(b"It purrs.").decode()},
    ])
    assert (await agent.session("s").chat(message)).status == "completed"
    [content] = provider.user_contents(loopback.requests[0].json)
    text_block = {"gemini": {"text": "Which animal?"}, "responses": {"type": "input_text", "text": "Which animal?"}}
    note_block = {"gemini": {"text": "It purrs."}, "responses": {"type": "input_text", "text": "It purrs."}}
    assert content == [
        IMAGE_BY_URL[provider.name],
        text_block.get(provider.name, {"type": "text", "text": "Which animal?"}),
        note_block.get(provider.name, {"type": "text", "text": "It purrs."}),  # a text/* file goes as text
    ]


def test_file_parts_become_typed_content_and_text_only_messages_stay_plain() -> None:
    [plain, with_files] = to_model_messages([
        UIMessage(id="a", role="user", parts=[{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]),
        attached(png_part(), text="look"),
    ])
    assert plain == UserMessage(content="hi there")
    assert with_files == UserMessage(content=[
        TextPart(text="look"), FilePart(media_type="image/png", data=PNG, filename="dot.png")])
    assert with_files.text == "look"


def test_a_browsers_media_type_alias_goes_under_its_iana_name() -> None:
    request = ModelRequest(messages=[UserMessage(content=[FilePart(media_type="Image/JPG", data="/9j/4A==")])])
    [message] = AnthropicModel("claude", api_key="k").build_body(request)["messages"]
    assert message["content"] == [{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                                               "data": "/9j/4A=="}}]


def test_data_urls_are_read_as_sent() -> None:
    assert parse_data_url("data:image/png;base64,AAAA") == ("image/png", "AAAA")
    assert parse_data_url("data:text/plain;charset=utf-8,caf%C3%A9") == (
        "text/plain", base64.b64encode("café".encode()).decode())
    assert parse_data_url("data:,hi") == ("text/plain", base64.b64encode(b"hi").decode())
    for bad in ("data:image/png;base64AAAA", "data:png;base64,AAAA"):
        with pytest.raises(ValueError, match="malformed data URL"):
            parse_data_url(bad)
    with pytest.raises(ValueError, match="data: or https://"):
        FilePart.from_url("file:///etc/passwd", "text/plain")


#: Files a provider cannot take, and what the error must name.
UNSUPPORTED = [
    (OPENAI, {"type": "file", "mediaType": "application/zip", "url": "data:application/zip;base64,UEsFBg=="},
     "application/zip"),
    (OPENAI, pdf_part("https://example.com/doc.pdf"), "by URL"),
    (RESPONSES, {"type": "file", "mediaType": "audio/wav", "url": "data:audio/wav;base64,UklGRg=="}, "audio/wav"),
    (ANTHROPIC, {"type": "file", "mediaType": "image/svg+xml", "url": "data:image/svg+xml;base64,PHN2Zy8+"},
     "image/svg+xml"),
    (GEMINI, {"type": "file", "mediaType": "image/gif", "url": "data:image/gif;base64,R0lGODlh"}, "image/gif"),
]


@pytest.mark.parametrize(("provider", "part", "named"), UNSUPPORTED, ids=lambda v: getattr(v, "name", None))
async def test_a_file_the_provider_cannot_take_fails_before_any_request_and_the_message_stays(
    provider: Provider, part: dict[str, Any], named: str, loopback: LoopbackServer
) -> None:
    model = provider.model(loopback)
    agent = make_agent(model, store=":memory:")
    session = agent.session("s")
    result = await session.chat(attached(part))
    assert result.status == "error"
    assert named in (result.error or "") and model.provider in (result.error or "")
    assert loopback.requests == []  # nothing was sent
    [user] = await session.messages()
    assert user.role == "user" and user.parts == attached(part).parts


def test_the_error_names_type_provider_and_file() -> None:
    part = FilePart(media_type="application/zip", data="UEsFBg==", filename="src.zip")
    request = ModelRequest(messages=[UserMessage(content=[TextPart(text="see"), part])])
    with pytest.raises(UnsupportedContent) as caught:
        OpenAIChatModel("gpt-4o", api_key="k").build_body(request)
    assert str(caught.value) == "openai cannot take a file of type 'application/zip' (src.zip)"
    assert caught.value.media_type == "application/zip" and caught.value.provider == "openai"


async def test_the_file_is_never_dropped_on_its_own_until_the_message_is_replaced(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(OPENAI.answer("Four.")))
    agent = make_agent(OPENAI.model(loopback), store=":memory:")
    session = agent.session("s")
    archive = {"type": "file", "mediaType": "application/zip", "url": "data:application/zip;base64,UEsFBg=="}
    assert (await session.chat(attached(archive))).status == "error"
    later = await session.chat("What is 2+2?")
    assert later.status == "error" and "application/zip" in (later.error or "") and loopback.requests == []
    # Without the file (the client edited the message away), the chat goes on.
    kept = [m for m in await session.messages() if m.role == "user" and m.text == "What is 2+2?"]
    await session.replace_messages(kept)
    assert (await session.chat("And now?")).status == "completed"
    assert OPENAI.user_contents(loopback.requests[0].json) == ["What is 2+2?", "And now?"]
