"""What an answer cites and the files a model made, as the terminal commands show them: one line
each (``source Title: url``, ``file image/png, 70 bytes``), live from the stream's chunks and from
the stored parts (a chunk and its part carry the same fields)."""

from __future__ import annotations

from typing import Any

#: The chunk (and part) types shown as a line of their own.
CITED_TYPES = frozenset({"source-url", "source-document", "file"})


def cited_line(part: dict[str, Any]) -> str:
    """A source the answer cites, or a file the model made (a terminal shows no image: its type
    and size say it came, never its base64)."""
    kind = part["type"]
    if kind == "source-url":
        return f"source {part.get('title') or part['url']}: {part['url']}"
    if kind == "source-document":
        return f"source {part['title']} ({part['mediaType']})"
    url = str(part["url"])
    if not url.startswith("data:"):
        return f"file {part['mediaType']}: {url}"
    data = url.partition(",")[2]
    return f"file {part['mediaType']}, {len(data) * 3 // 4 - data.count('=')} bytes"
