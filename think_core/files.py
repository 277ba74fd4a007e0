"""``File``: an image or document a tool returns, alone or in a list beside text.

A tool's result is stored and streamed as JSON, so a ``File`` becomes the AI SDK ``file`` part
form (``{"type": "file", "mediaType": ..., "url": "data:...;base64,...", "filename": ...}``):
a result with files is a list of ``{"type": "text", "text": ...}`` and such file items, in
the order the tool gave them. A chat page shows the items as they are; each provider gets the
files its own way (see ``think_core/models/content.py``).
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from .models.content import FilePart, file_item

__all__ = ["File", "tool_output_with_files"]


@dataclass(frozen=True, init=False)
class File:
    """A file a tool returns: ``File(data=png_bytes, media_type="image/png")``.

    ``data``: the bytes, or their base64 text (as MCP and most APIs hand them over; checked
    here, so a wrong string fails in the tool, not in the provider). ``media_type``: the IANA
    type (``image/png``, ``application/pdf``, ``text/csv``). ``filename``: shown to the model
    and on the chat page where the provider takes one.

    Think: the AI SDK's tool ``toModelOutput`` content with ``media`` parts; MCP's ``image``
    content maps onto it.
    """

    data: bytes
    media_type: str
    filename: str | None

    def __init__(self, data: bytes | str, media_type: str, filename: str | None = None) -> None:
        if isinstance(data, str):
            try:
                data = base64.b64decode(data, validate=True)
            except binascii.Error as exc:
                raise ValueError(f"File data given as text must be base64: {exc}") from None
        elif not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"File data must be bytes or base64 text, not {type(data).__name__}")
        if not isinstance(media_type, str) or "/" not in media_type:
            raise ValueError(f"File needs a media type such as 'image/png', not {media_type!r}")
        object.__setattr__(self, "data", bytes(data))
        object.__setattr__(self, "media_type", media_type)
        object.__setattr__(self, "filename", filename)

    @classmethod
    def from_path(cls, path: str | Path, media_type: str | None = None) -> File:
        """The file at ``path``; its media type guessed from the name unless given."""
        path = Path(path)
        guessed = media_type or mimetypes.guess_type(path.name)[0]
        if guessed is None:
            raise ValueError(f"cannot tell the media type of {path.name!r}: pass media_type=")
        return cls(path.read_bytes(), guessed, path.name)

    def __repr__(self) -> str:  # never the bytes: a tool's repr lands in logs
        name = f", filename={self.filename!r}" if self.filename else ""
        return f"File(<{len(self.data)} bytes>, media_type={self.media_type!r}{name})"

    def item(self) -> dict[str, Any]:
        """The file as its JSON item (an AI SDK ``file`` part with a data URL)."""
        encoded = base64.b64encode(self.data).decode("ascii")
        return file_item(FilePart(media_type=self.media_type, data=encoded, filename=self.filename))


def tool_output_with_files(value: Any) -> list[dict[str, Any]] | None:
    """A tool's result that holds files, as the JSON list the store, the UI stream and the
    providers read: a ``File``, or a list or tuple with at least one ``File`` (strings become
    text items, anything else its JSON as text). ``None`` for any other result."""
    if isinstance(value, File):
        return [value.item()]
    if not isinstance(value, (list, tuple)) or not any(isinstance(item, File) for item in value):
        return None
    return [_item(item) for item in value]


def _item(value: Any) -> dict[str, Any]:
    if isinstance(value, File):
        return value.item()
    if isinstance(value, str):
        return {"type": "text", "text": value}
    text = json.dumps(to_jsonable_python(value, fallback=repr), ensure_ascii=False)
    return {"type": "text", "text": text}
