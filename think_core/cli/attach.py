"""``think chat``'s ``/attach PATH``: a file from disk as the AI SDK ``file`` part a chat page
would send (a base64 ``data:`` URL), carried by the next message.

The media type is guessed from the file's name, else from its first bytes (PNG, JPEG, GIF,
WebP, PDF), else ``application/octet-stream``. The file is only read here; the session checks it
against the agent's attachment limits when the message is sent, as for any other entry path.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Any

from ..chat.attachments import sniff_media_type
from ..files import File

__all__ = ["file_part", "message_with_files"]


def file_part(path: str) -> dict[str, Any]:
    """The ``file`` part of the file at ``path`` (``~`` expanded). Raises ``OSError`` when it
    cannot be read."""
    file = Path(path).expanduser()
    data = file.read_bytes()
    media_type = mimetypes.guess_type(file.name)[0] or sniff_media_type(data) or "application/octet-stream"
    return File(data, media_type, file.name).item()


def message_with_files(text: str, files: list[dict[str, Any]]) -> dict[str, Any]:
    """A user message of ``text`` and ``files``, in the order ``useChat``'s
    ``sendMessage({ text, files })`` puts them (the files first)."""
    return {"role": "user", "parts": [*files, {"type": "text", "text": text}]}
