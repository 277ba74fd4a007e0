"""The files a user sends are checked before anything is stored: each one's size and one
message's together (``Think(attachments=...)``), a well-formed data URL, bytes that are what the
``mediaType`` says. A refused message raises a ``think_core.errors`` type on every entry path,
with no model request and nothing stored (on SQLite and on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.support import agents
from tests.support.files import DOT_PNG, JPEG_START, file_part, png_of_size, user_with_files
from think_core import AttachmentLimits, AttachmentTooLarge, InvalidAttachment
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step
from think_core.session import Session

LIMITS = AttachmentLimits(max_file_bytes=1000, max_message_bytes=1500)

Entry = Callable[[Session, Any], Awaitable[Any]]


async def _chat(session: Session, message: dict[str, Any]) -> Any:
    return await session.chat(message)


async def _stream(session: Session, message: dict[str, Any]) -> Any:
    return [chunk async for chunk in session.stream(message)]


async def _save(session: Session, message: dict[str, Any]) -> Any:
    return await session.save_messages([message])


async def _submit(session: Session, message: dict[str, Any]) -> Any:
    return await session.submit_messages(message)


async def _add(session: Session, message: dict[str, Any]) -> Any:
    return await session.add_messages([message])


async def _replace(session: Session, message: dict[str, Any]) -> Any:
    return await session.replace_messages([message], from_client=True)


ENTRIES = [_chat, _stream, _save, _submit, _add, _replace]

REFUSED = {
    "file too large": (user_with_files("look", "u1", file_part(png_of_size(1001))), AttachmentTooLarge, ["'dot.png'", "1,000 bytes"]),
    "message too large": (
        user_with_files("look", "u1", file_part(png_of_size(800)), file_part(png_of_size(800), filename="b.png")),
        AttachmentTooLarge,
        ["message 'u1'", "1,600 bytes together", "1,500"],
    ),
    "malformed base64": (
        user_with_files("look", "u1", {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,iVBO*w=="}),
        InvalidAttachment,
        ["base64", "malformed"],
    ),
    "no comma": (
        user_with_files("look", "u1", {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64"}),
        InvalidAttachment,
        ["not a valid data URL"],
    ),
    "bytes not the type": (user_with_files("look", "u1", file_part(JPEG_START)), InvalidAttachment, ["'dot.png'", "not image/png", "look like image/jpeg"]),
    "pdf without signature": (
        user_with_files("read", "u1", file_part(b"hello", "application/pdf", "a.pdf")),
        InvalidAttachment,
        ["'a.pdf'", "not application/pdf"],
    ),
    "no media type": (
        user_with_files("look", "u1", {"type": "file", "url": file_part(DOT_PNG)["url"]}),
        InvalidAttachment,
        ["mediaType"],
    ),
    "file url": (
        user_with_files("look", "u1", {"type": "file", "mediaType": "image/png", "url": "file:///etc/passwd"}),
        InvalidAttachment,
        ["https://", "file:///"],
    ),
}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.__name__.strip("_"))
@pytest.mark.parametrize("case", list(REFUSED))
async def test_a_refused_attachment_raises_and_stores_nothing(case: str, entry: Entry) -> None:
    message, error, says = REFUSED[case]
    model = ScriptedModel([Step(text="never")])
    agent = agents.make_agent(model, store=":memory:", attachments=LIMITS)
    session = agent.session("s")
    with pytest.raises(error) as raised:
        await entry(session, message)
    assert all(fragment in str(raised.value) for fragment in says), (says, str(raised.value))
    assert model.requests == []
    assert await session.messages() == []
    assert await session.list_submissions() == []


async def test_files_within_the_limits_are_stored_as_sent(db: str) -> None:
    model = ScriptedModel([Step(text="A dot."), Step(text="Two files.")])
    agent = agents.make_agent(model, store=db, attachments=LIMITS)
    session = agent.session("s")
    first = user_with_files("what is it?", "u1", file_part(DOT_PNG))
    both = user_with_files(
        "and these?",
        "u2",
        file_part(png_of_size(700)),
        file_part(b"%PDF-1.4 tiny", "application/pdf", "a.pdf"),
        file_part(JPEG_START, "image/jpg", "photo.jpg"),  # another name of JPEG
        {"type": "file", "mediaType": "text/plain", "filename": "n.txt", "url": "data:text/plain,a%20note"},
        {"type": "file", "mediaType": "image/png", "url": "https://example.com/large.png"},
    )
    await session.chat(first)
    await session.chat(both)
    stored = await session.messages()
    assert [m.parts for m in stored if m.role == "user"] == [first["parts"], both["parts"]]
    assert len(model.requests) == 2


async def test_the_defaults_take_a_photo_and_refuse_more_than_10_mib() -> None:
    assert AttachmentLimits() == AttachmentLimits(max_file_bytes=10 * 2**20, max_message_bytes=20 * 2**20)
    model = ScriptedModel([Step(text="Nice photo.")])
    agent: Think = agents.make_agent(model, store=":memory:")
    session = agent.session("s")
    await session.chat(user_with_files("look", "u1", file_part(png_of_size(5 * 2**20))))
    with pytest.raises(AttachmentTooLarge, match="10,485,760 bytes"):
        await session.chat(user_with_files("and this", "u2", file_part(png_of_size(10 * 2**20 + 1))))
    assert [m.id for m in await session.messages() if m.role == "user"] == ["u1"]


def test_limits_are_checked_as_settings() -> None:
    with pytest.raises(ValueError):
        AttachmentLimits(max_file_bytes=0)
    agent = agents.make_agent(ScriptedModel([]), store=":memory:", attachments={"max_file_bytes": 5})
    assert agent.attachments == AttachmentLimits(max_file_bytes=5)


@pytest.mark.parametrize("entry", [_chat, _submit], ids=["chat", "submit"])
async def test_nothing_is_half_stored_on_either_backend(db: str, entry: Entry) -> None:
    model = ScriptedModel([Step(text="Only the text.")])
    agent = agents.make_agent(model, store=db, attachments=LIMITS)
    session = agent.session("s")
    valid_then_too_large = [
        user_with_files("first", "u1", file_part(DOT_PNG)),
        user_with_files("second", "u2", file_part(png_of_size(1001), filename="big.png")),
    ]
    with pytest.raises(AttachmentTooLarge, match="'big.png'"):
        await entry(session, valid_then_too_large)
    assert await session.messages() == [] and await session.list_submissions() == []
    await session.chat("just text")
    assert [m.role for m in await session.messages()] == ["user", "assistant"] and len(model.requests) == 1
