"""Files a user attaches, as the AI SDK sends them: ``file`` parts with a ``data:`` URL."""

from __future__ import annotations

import base64
from typing import Any

#: A 1x1 PNG (a real image a browser can show).
DOT_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
#: The start of a JPEG (its signature and a JFIF header).
JPEG_START = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"


def data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def png_of_size(size: int) -> bytes:
    """``size`` bytes that start as a PNG does (enough for a signature check)."""
    return DOT_PNG[:8] + bytes(size - 8)


def file_part(data: bytes, media_type: str = "image/png", filename: str | None = "dot.png", **extra: Any) -> dict[str, Any]:
    """An AI SDK ``file`` part holding ``data`` as a data URL."""
    part: dict[str, Any] = {"type": "file", "mediaType": media_type, "url": data_url(data, media_type), **extra}
    if filename is not None:
        part["filename"] = filename
    return part


def user_with_files(text: str, id: str, *parts: dict[str, Any]) -> dict[str, Any]:
    """A user UI message with ``text`` and file parts, as ``sendMessage({ text, files })`` sends it
    (the files first, then the text)."""
    return {"id": id, "role": "user", "parts": [*parts, {"type": "text", "text": text}]}
