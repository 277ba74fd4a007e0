"""The files a user sends (AI SDK ``file`` parts of user messages), checked before anything is
stored: each one's size and the sum of one message's against :class:`AttachmentLimits`, its
``url`` a well-formed ``data:`` URL (or an ``http(s):`` one, which think never fetches), and
its bytes what its ``mediaType`` says they are (the signatures of PNG, JPEG, GIF, WebP and PDF).

A refused attachment raises :class:`~think_core.errors.AttachmentTooLarge` (the server's 413)
or :class:`~think_core.errors.InvalidAttachment` (its 400) naming the file, and nothing of the
request is stored: every entry path checks its messages before it writes them.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import AttachmentTooLarge, InvalidAttachment
from ..messages import MessageInput, coerce_messages
from ..models.content import canonical_media_type, parse_data_url
from ..types import UIMessage

__all__ = ["AttachmentLimits", "check_attachments", "checked_messages", "sniff_media_type"]

MIB = 1024 * 1024


class AttachmentLimits(BaseModel):
    """``Think(attachments=AttachmentLimits(...))``: how large the files of one user message may
    be (decoded bytes of their data URLs; a file given by ``https:`` URL is not counted). The
    defaults take what the providers take inline (a photo, a long PDF) and keep a request within
    ``think serve``'s default body limit of 32 MiB."""

    model_config = ConfigDict(frozen=True)

    max_file_bytes: int = Field(10 * MIB, gt=0)
    max_message_bytes: int = Field(20 * MIB, gt=0)


#: URL schemes a file part may use: its bytes inline, or a link the provider fetches itself.
REMOTE_SCHEMES = ("https://", "http://")

def sniff_media_type(data: bytes) -> str | None:
    """The media type ``data``'s first bytes announce, for the formats chat pages send most;
    ``None`` for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    return None


#: The media types :func:`sniff_media_type` recognises.
SIGNED_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"})


def _describe(part: dict[str, Any]) -> str:
    name = part.get("filename")
    kind = part.get("mediaType")
    label = repr(name) if isinstance(name, str) and name else "without a filename"
    return f"attachment {label}" + (f" ({kind})" if isinstance(kind, str) and kind else "")


def _file_bytes(part: dict[str, Any], limits: AttachmentLimits) -> int:
    """The decoded size of one ``file`` part (0 for a link); raises when it is refused."""
    what = _describe(part)
    media_type, url = part.get("mediaType"), part.get("url")
    if not isinstance(media_type, str) or "/" not in media_type:
        raise InvalidAttachment(f"{what}: 'mediaType' must be a media type such as image/png")
    if not isinstance(url, str) or not url:
        raise InvalidAttachment(f"{what}: 'url' must be a data: URL or an https:// URL")
    if url[:8].lower().startswith(REMOTE_SCHEMES):
        return 0
    if url[:5].lower() != "data:":
        raise InvalidAttachment(f"{what}: 'url' must be a data: URL or an https:// URL, not {url[:16]!r}...")
    data = _decoded(url, what, limits)
    declared = canonical_media_type(media_type)  # image/jpg is checked as image/jpeg
    found = sniff_media_type(data)
    if declared in SIGNED_TYPES and found != declared:
        looks = f"they look like {found}" if found else "they have no signature think knows"
        raise InvalidAttachment(f"{what}: the bytes are not {declared} ({looks})")
    return len(data)


def _decoded(url: str, what: str, limits: AttachmentLimits) -> bytes:
    """The bytes of a data URL, refused before decoding when they cannot fit the limit."""
    try:
        payload = parse_data_url(url)[1]
    except ValueError as exc:
        raise InvalidAttachment(f"{what}: 'url' is not a valid data URL: {exc}") from None
    too_large = f"{what} is larger than {limits.max_file_bytes:,} bytes, the most one file may have"
    if len(payload) // 4 * 3 > limits.max_file_bytes + 2:
        raise AttachmentTooLarge(f"{too_large} (about {len(payload) // 4 * 3:,} bytes)")
    try:
        data = binascii.a2b_base64(payload, strict_mode=True)
    except binascii.Error as exc:
        raise InvalidAttachment(f"{what}: the base64 data of its data URL is malformed ({exc})") from None
    if len(data) > limits.max_file_bytes:
        raise AttachmentTooLarge(f"{too_large} ({len(data):,} bytes)")
    return data


def check_attachments(messages: Iterable[UIMessage], limits: AttachmentLimits) -> None:
    """Refuse the user messages among ``messages`` whose ``file`` parts break ``limits`` or are
    malformed (see the module's description)."""
    for message in messages:
        if message.role != "user":
            continue
        total = 0
        for part in message.parts:
            if part.get("type") == "file":
                total += _file_bytes(part, limits)
        if total > limits.max_message_bytes:
            raise AttachmentTooLarge(
                f"the attachments of message {message.id!r} are {total:,} bytes together; "
                f"at most {limits.max_message_bytes:,} bytes per message"
            )


def checked_messages(value: MessageInput, limits: AttachmentLimits) -> list[UIMessage]:
    """``value`` as UI messages (:func:`~think_core.messages.coerce_messages`), their
    attachments checked."""
    messages = coerce_messages(value)
    check_attachments(messages, limits)
    return messages
