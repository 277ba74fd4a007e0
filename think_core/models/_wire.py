"""Helpers every provider's wire mapping uses: tool results as text, streamed tool input as a
dict, names the APIs accept, stop reasons in the engine's vocabulary."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from .base import ToolMessage

__all__ = ["TextEventShape", "decode_json", "parse_tool_input", "stop_reason_mapper", "tool_output_text", "wire_name"]

# The decoder's own C scanner (set in JSONDecoder.__init__; the type stubs do not list it).
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_json(text: str) -> Any:
    """``json.loads(text)``, faster for the common event payload that is exactly one JSON value.

    It runs once per streamed token, so it calls the scanner directly and skips ``loads``'s
    whitespace scans and frames; anything else (whitespace around the value, a BOM, not JSON)
    goes through ``json.loads`` itself, so the result and the error are the same.
    """
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


class TextEventShape:
    """Recognises the stream's common event, a text delta, without parsing it as JSON.

    Nearly every event of a streamed answer is the same JSON text around a different string
    (``{"id":"…","choices":[{"index":0,"delta":{"content":"…"}…}]}``). Once a fully parsed
    event turned out to be exactly such a text delta, :meth:`learn` keeps the bytes before and
    after its string; :meth:`match` then takes an event with the same bytes around a plain JSON
    string (no escapes, no quotes) as that text. Anything else (an escape, another key, another
    id, the finish chunk) does not match and is parsed in full, so the events are the same
    either way: the same surrounding bytes mean the same parsed fields.
    """

    __slots__ = ("prefix", "suffix", "_start", "_tail")

    def __init__(self) -> None:
        self.prefix = "\0"  # matches no event until a shape is learned
        self.suffix = ""
        self._start = self._tail = 1  # where the text starts; how far from the end it stops

    def learn(self, data: str, key: str, text: str) -> None:
        """``data`` parsed to a text delta of ``text`` under ``key`` and nothing else."""
        if '"' in text or "\\" in text:
            return
        literal = f'"{key}":"{text}"'
        at = data.find(literal)
        if at < 0 or data.find(literal, at + 1) >= 0:
            return
        split = at + len(key) + 3
        self.prefix, self.suffix = data[:split], data[split + len(text) + 2 :]
        self._start, self._tail = len(self.prefix) + 1, len(self.suffix) + 1

    def match(self, data: str) -> str | None:
        """The text of ``data`` if it has the learned shape, else ``None``."""
        if not data.startswith(self.prefix) or not data.endswith(self.suffix):
            return None
        end = len(data) - self._tail
        if end <= self._start or data[self._start - 1] != '"' or data[end] != '"':
            return None
        text = data[self._start : end]
        # A quote or backslash means escapes; a control character is invalid JSON: parse those.
        if '"' in text or "\\" in text or not text.isprintable():
            return None
        return text

def tool_output_text(message: ToolMessage) -> str:
    """A tool result as the string the model reads (JSON for anything but a string)."""
    output = message.output
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(output)


def parse_tool_input(raw: str) -> dict[str, Any] | None:
    """A streamed call's input: ``{}`` for empty arguments (a tool without parameters), ``None``
    unless the text is a JSON object (the engine reports that to the model)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


_UNSAFE_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def wire_name(name: str, max_length: int) -> str:
    """``name`` as the APIs accept tool and schema names: ``[a-zA-Z0-9_-]{1,max_length}``."""
    return (_UNSAFE_NAME_CHARS.sub("_", name) or "output")[:max_length]


def stop_reason_mapper(table: Mapping[str, str]) -> Callable[[str | None], str]:
    """A function from a provider's stop reason to the engine's vocabulary (``stop``, ``length``,
    ``tool-calls``, ``content-filter``), ``other`` for a reason the table does not know."""

    def engine_reason(reason: str | None) -> str:
        return table.get(reason or "", "other")

    return engine_reason
