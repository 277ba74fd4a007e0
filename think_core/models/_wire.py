"""Helpers every provider's wire mapping uses: tool results as text, streamed tool input as a
dict, names the APIs accept, stop reasons in the engine's vocabulary."""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Callable, Mapping
from itertools import accumulate
from typing import Any

from ..events import TextDelta
from .base import ToolMessage

__all__ = ["TextEventShape", "decode_json", "parse_tool_input", "stop_reason_mapper", "tool_output_text", "wire_name"]

# The decoder's own C string scanner: json.loads decodes every string with it (strict).
_scan_string: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]

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


_NOT_PLAIN = re.compile(r'["\\\x00-\x1f]')
"""A character a JSON string holds only escaped (a quote, a backslash, a control character):
text without one is spelled the same inside a JSON string as outside it."""


class TextEventShape:
    """Recognises the stream's common event, a text delta, without parsing it as JSON.

    Nearly every event of a streamed answer is the same JSON text around a different string
    (``{"id":"…","choices":[{"index":0,"delta":{"content":"…"}…}]}``). Once a fully parsed
    event turned out to be exactly such a text delta, :meth:`learn` keeps the text before and
    after its string; :meth:`match` then takes an event with the same text around a plain
    JSON string (no escapes) as that text. Anything else (an escape, another key, another id,
    the finish chunk) does not match and is parsed in full, so the events are the same either
    way: the same surrounding text means the same parsed fields.

    A field the mapper ignores may differ in every event (OpenAI's random ``obfuscation``
    padding): named to :meth:`learn`, its value is skipped instead of compared, provided it
    comes after the text and is a plain string.

    It is also the SSE decoder's :class:`~think_core.models.sse.Shortcut` for those events:
    ``head``/``tail`` are the event's text on the wire around its string, and :meth:`take` maps
    a run of them to text deltas in one go.
    """

    __slots__ = ("prefix", "suffix", "varying", "head", "tail", "junction")

    def __init__(self) -> None:
        self.prefix = "\0"  # matches no event until a shape is learned
        self.suffix = ""
        #: With a varying field: the text from the end of the string to that field's value.
        self.varying = ""
        self.head = self.tail = self.junction = ""

    def learn(self, event: str, data: str, key: str, text: str, ignored: tuple[str, Any] | None = None) -> None:
        """The SSE event ``event`` with ``data`` parsed to a text delta of ``text`` under ``key``
        and nothing else; ``ignored``: a field (name, value) the mapper does not read."""
        if _NOT_PLAIN.search(text) or "\n" in data:
            return  # spelled otherwise in the JSON, or a payload of several data lines
        literal = f'"{key}":"{text}"'
        at = data.find(literal)
        if at < 0 or data.find(literal, at + 1) >= 0:
            return
        split = at + len(key) + 4
        prefix, suffix, varying = data[:split], data[split + len(text) :], ""
        if ignored is not None:
            name, value = ignored
            if not isinstance(value, str) or _NOT_PLAIN.search(value):
                return
            field = f'"{name}":"{value}"'
            where = suffix.find(field)
            if where < 0 or suffix.find(field, where + 1) >= 0 or f'"{name}":' in prefix:
                return  # not after the text, or not there verbatim: learning it would not last
            value_at = where + len(name) + 4
            varying, suffix = suffix[:value_at], suffix[value_at + len(value) :]
        self.prefix, self.suffix, self.varying = prefix, suffix, varying
        # The event on the wire, as servers write it: an optional event line, one data line.
        self.head = ("" if event == "message" else f"event: {event}\n") + "data: " + prefix
        self.tail = suffix + "\n\n"
        self.junction = self.tail + self.head

    def match(self, data: str) -> str | None:
        """The text of ``data`` if it has the learned shape, else ``None`` (also for an empty
        text, which maps to no event)."""
        prefix, suffix = self.prefix, self.suffix
        if not data.startswith(prefix) or not data.endswith(suffix):
            return None
        body = data[len(prefix) : len(data) - len(suffix)]
        if len(prefix) + len(body) + len(suffix) != len(data):
            return None  # prefix and suffix overlap
        return self._text(body) or None

    def _text(self, body: str) -> str | None:
        """The text of an event whose data is ``prefix + body + suffix``; ``None`` if it is not
        this shape after all."""
        if self.varying:
            body, found, value = body.rpartition(self.varying)
            if not found or _NOT_PLAIN.search(value):
                return None
        return body if _NOT_PLAIN.search(body) is None else _string_body(body)

    def take(self, parts: list[str], generic: Callable[[str], list[Any]]) -> list[Any]:
        """Text deltas for the strings of a run of events of the learned shape. A string that is
        not a JSON string's body (a quote or line break in it: not this event's whole text)
        goes back to ``generic``."""
        if self.varying:
            return self._take_each(parts, generic)
        if len(parts) == 1:  # a read of one event (a live model's): no run to cut up
            part = parts[0]
            if _NOT_PLAIN.search(part) is None:
                return [TextDelta(part)] if part else []
            return self._take_each(parts, generic)
        joined = "".join(parts)
        found = _NOT_PLAIN.search(joined)
        if found is None:  # the common run: plain text only
            return list(map(TextDelta, filter(None, parts)))  # an empty text maps to no event
        ends = list(accumulate(map(len, parts)))
        events: list[Any] = []
        done = 0
        while found is not None:
            at = bisect_right(ends, found.start())  # the part that character is in
            events += map(TextDelta, filter(None, parts[done:at]))
            events += self._take_each([parts[at]], generic)
            done = at + 1
            found = _NOT_PLAIN.search(joined, ends[at])
        events += map(TextDelta, filter(None, parts[done:]))
        return events

    def _take_each(self, parts: list[str], generic: Callable[[str], list[Any]]) -> list[Any]:
        events: list[Any] = []
        text_of = self._text
        for part in parts:
            text = text_of(part)
            if text is None:
                events += generic(part)
            elif text:
                events.append(TextDelta(text))
        return events


def _string_body(body: str) -> str | None:
    """What the JSON string ``"<body>"`` decodes to, or ``None`` if ``body`` is not exactly a
    string's body (it holds a quote that ends the string early, a raw control character, or a
    trailing backslash that escapes the closing quote)."""
    try:
        text, end = _scan_string(body + '"', 0, True)
    except ValueError:
        return None
    return text if end == len(body) + 1 else None


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
