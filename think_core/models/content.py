"""What a message holds besides plain text: its parts in order, text and files (images,
documents), as every provider's request mapping reads them.

A file is either its bytes (``data``, base64, from a ``data:`` URL) or a URL the provider
fetches itself (``https://``). Each provider maps the parts onto its own blocks and raises
:class:`~think_core.errors.UnsupportedContent` for a user's file it cannot take, before any
request; a tool's file it cannot take becomes a note to the model and a step warning
(:func:`tool_blocks`). A file is never dropped silently.

Tool results carry files in the JSON form the UI stream and the store use (the AI SDK ``file``
part): ``[{"type": "text", "text": ...}, {"type": "file", "mediaType": ..., "url": ...}]``;
:func:`tool_output_parts` reads that form back.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal
from urllib.parse import unquote_to_bytes

from pydantic import AfterValidator, BaseModel, Field

from ..errors import UnsupportedContent
from .exchange import warn

__all__ = [
    "IMAGE_TYPES",
    "MEDIA_TYPE_ALIASES",
    "ContentPart",
    "FilePart",
    "TextPart",
    "text_or_file",
    "canonical_media_type",
    "file_item",
    "tool_blocks",
    "parse_data_url",
    "tool_output_parts",
    "unsupported",
]


#: The image types OpenAI and Anthropic take (Gemini's list differs: its own mapping says).
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


class TextPart(BaseModel):
    """Text of a message, in its place among the files."""

    type: Literal["text"] = "text"
    text: str


#: Media types browsers and clients send under another name than the IANA one the APIs want.
MEDIA_TYPE_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg", "audio/x-wav": "audio/wav",
                      "audio/mp3": "audio/mpeg"}


def canonical_media_type(media_type: str) -> str:
    """``media_type`` lower-cased, under its IANA name (``image/jpg`` → ``image/jpeg``);
    parameters (``;charset=utf-8``) are kept."""
    base, sep, params = media_type.strip().partition(";")
    base = base.strip().lower()
    return MEDIA_TYPE_ALIASES.get(base, base) + sep + params


class FilePart(BaseModel):
    """A file of a message: its bytes (``data``, base64) or where to fetch them (``url``).
    ``media_type`` is the IANA type (``image/png``, ``application/pdf``), made canonical."""

    type: Literal["file"] = "file"
    media_type: Annotated[str, AfterValidator(canonical_media_type)]
    data: str | None = None
    url: str | None = None
    filename: str | None = None

    @classmethod
    def from_url(cls, url: str, media_type: str | None = None, filename: str | None = None) -> FilePart:
        """The file of an AI SDK ``file`` part: ``url`` a ``data:`` URL or an ``http(s)://`` one;
        ``media_type`` the part's ``mediaType`` (a data URL's own type when it is missing)."""
        if url.startswith("data:"):
            own_type, data = parse_data_url(url)
            return cls(media_type=media_type or own_type, data=data, filename=filename)
        if not url.startswith(("https://", "http://")):
            raise ValueError(f"a file's url must be a data: or https:// URL, not {url[:40]!r}")
        if not media_type:
            raise ValueError(f"the file at {url[:80]} has no mediaType")
        return cls(media_type=media_type, url=url, filename=filename)

    @property
    def kind(self) -> str:
        """``image``, ``pdf``, ``text``, ``audio``, ``video`` or ``other``: what decides how a
        provider takes it."""
        major, _, minor = self.media_type.partition(";")[0].partition("/")
        if major == "application" and minor == "pdf":
            return "pdf"
        return major if major in ("image", "text", "audio", "video") else "other"

    @property
    def data_url(self) -> str:
        """The bytes as a ``data:`` URL, or the URL itself for a file by URL."""
        if self.data is None:
            return self.url or ""
        return f"data:{self.media_type};base64,{self.data}"

    def text(self, provider: str) -> str:
        """A ``text/*`` file's content, which every provider takes as text."""
        if self.data is None:
            raise unsupported(self, provider, "by URL (send its bytes as a data URL)")
        try:
            return base64.b64decode(self.data, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise UnsupportedContent(
                f"the {self.media_type} file{self._name()} is not UTF-8 text in base64: {exc}",
                media_type=self.media_type, provider=provider,
            ) from None

    def _name(self) -> str:
        return f" {self.filename!r}" if self.filename else ""


ContentPart = Annotated[TextPart | FilePart, Field(discriminator="type")]


def text_or_file(part: TextPart | FilePart, provider: str) -> str | FilePart:
    """What a provider gets for ``part``: text for a text part and for a ``text/*`` file (every
    provider takes those as text), else the file to map onto its own blocks."""
    if isinstance(part, TextPart):
        return part.text
    return part.text(provider) if part.kind == "text" else part


def parse_data_url(url: str) -> tuple[str, str]:
    """The media type and base64 data of ``data:[<type>][;base64],<data>`` (a URL-encoded
    payload is re-encoded as base64). ``ValueError`` for anything else."""
    header, comma, payload = url.partition(",")
    if not url.startswith("data:") or not comma:
        raise ValueError(f"malformed data URL (no comma after the header): {url[:40]!r}")
    params = header[len("data:"):].split(";")
    media_type = params[0].strip() or "text/plain"
    if "/" not in media_type:
        raise ValueError(f"malformed data URL (media type {media_type!r}): {url[:40]!r}")
    if "base64" in (p.strip().lower() for p in params[1:]):
        return media_type, payload.strip()
    return media_type, base64.b64encode(unquote_to_bytes(payload)).decode("ascii")


def unsupported(part: FilePart, provider: str, how: str = "") -> UnsupportedContent:
    """The error for a file ``provider`` cannot take (``how``: e.g. ``"by URL"``)."""
    name = f" ({part.filename})" if part.filename else ""
    way = f" {how}" if how else ""
    return UnsupportedContent(
        f"{provider} cannot take a file of type {part.media_type!r}{name}{way}",
        media_type=part.media_type,
        provider=provider,
    )


def file_item(part: FilePart) -> dict[str, Any]:
    """``part`` in the AI SDK ``file`` part form the UI stream and the store carry."""
    item: dict[str, Any] = {"type": "file", "mediaType": part.media_type, "url": part.data_url}
    if part.filename:
        item["filename"] = part.filename
    return item


def tool_output_parts(output: Any) -> list[TextPart | FilePart] | None:
    """A tool output's text and files in order, if it carries files (a list of ``text`` and
    ``file`` items with at least one file, as the engine stores a tool's ``File`` results);
    ``None`` for any other output, which goes to the model as JSON text."""
    if not isinstance(output, list) or not output:
        return None
    parts: list[TextPart | FilePart] = []
    for item in output:
        part = _item_part(item)
        if part is None:
            return None
        if not isinstance(part, TextPart) or part.text:  # an empty text block is refused by some APIs
            parts.append(part)
    return parts if any(isinstance(p, FilePart) for p in parts) else None


def _item_part(item: Any) -> TextPart | FilePart | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind == "text" and isinstance(item.get("text"), str):
        return TextPart(text=item["text"])
    url, media_type = item.get("url"), item.get("mediaType")
    if kind != "file" or not isinstance(url, str) or not isinstance(media_type, str):
        return None
    try:
        return FilePart.from_url(url, media_type, item.get("filename"))
    except ValueError:
        return None


def tool_blocks(
    parts: Sequence[TextPart | FilePart], block: Callable[[TextPart | FilePart, int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """A tool result's parts as a provider's blocks (``block(part, index)``). A file the provider
    cannot take becomes a text block saying so, and a step warning: the tool has run, so its
    result must reach the model, which is told what it cannot see instead of nothing."""
    blocks: list[dict[str, Any]] = []
    for n, part in enumerate(parts):
        try:
            blocks.append(block(part, n))
        except UnsupportedContent as exc:
            warn(f"{exc}; the tool's file was replaced by a note to the model")
            blocks.append(block(TextPart(text=f"[the tool returned a file the model cannot see: {exc}]"), n))
    return blocks


def joined_text(parts: Sequence[TextPart | FilePart]) -> str:
    """The text parts of ``parts``, one after the other."""
    return "".join(p.text for p in parts if isinstance(p, TextPart))
