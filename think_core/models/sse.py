"""Server-sent events decoding for streaming model responses.

Providers stream their answers as ``text/event-stream``. The framing rules (WHATWG HTML,
"Parsing an event stream") are easy to get subtly wrong, and real servers exercise every
corner: Gemini/Vertex frame with CRLF, OpenRouter sends ``: OPENROUTER PROCESSING`` comments,
Anthropic sends ``event:`` lines, and TCP splits reads anywhere (inside a UTF-8 sequence,
between ``\\r`` and ``\\n``). This module implements the rules once.

It sits on the per-token hot path, so it works on whole chunks: one incremental UTF-8 decode
per read, ``str.split("\\n")`` for the lines, and a ``startswith("data:")`` fast path. There
is no per-byte Python loop.

A consumer that knows the text of its stream's most common event may also hand the decoder a
:class:`Shortcut`: a run of such events is then cut out of a read with one ``str.split`` and
mapped by the consumer in bulk, without a line loop or an :class:`SSEEvent` per event.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["SSEDecoder", "SSEEvent", "Shortcut", "aiter_sse", "aiter_sse_batches"]


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event. ``event`` defaults to ``"message"`` as the spec says; ``id`` is the
    last event id seen so far in the stream (it persists across events), ``retry`` the
    reconnection time in milliseconds when this event carried a valid ``retry:`` field."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class Shortcut(Protocol):
    """Events whose whole text is known but for one varying part, mapped by the consumer itself.

    Such an event is ``head + part + tail`` on the wire (its field lines, then the blank line
    that ends it); ``junction`` is ``tail + head``, the text between two of them in a row, or
    ``""`` while the shape is not known yet. The decoder splits a read at the junctions: every
    piece between two of them is the part of one whole event that began with no event pending,
    and :meth:`take` maps a run of such parts to what the consumer wants in the decoder's output
    in their place. ``take`` decides which parts really are that event (a part holding a line
    break, say, is not) and passes any other back to ``generic``, which decodes
    ``head + part + tail`` as usual.
    """

    junction: str
    head: str
    tail: str

    def take(self, parts: list[str], generic: Callable[[str], list[Any]]) -> list[Any]: ...


class SSEDecoder:
    """Incremental decoder: :meth:`feed` bytes as they arrive, get the completed events back.

    A sync object on purpose: it can be driven by any byte source and unit-tested without I/O.
    With a ``shortcut``, the output holds what its :meth:`Shortcut.take` made of the events it
    recognised, in stream order among the other events.
    """

    __slots__ = ("_decoder", "_tail", "_skip_lf", "_data", "_event", "_id", "_retry", "_shortcut", "_started", "_pending")

    def __init__(self, shortcut: Shortcut | None = None) -> None:
        self._shortcut = shortcut
        # utf-8-sig drops a leading BOM even when it is split across reads.
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._started = False  # the decoder has output text (a leading BOM is dropped there)
        self._pending = False  # the decoder holds part of a character
        self._tail = ""  # an unterminated line carried over to the next read
        self._skip_lf = False  # the previous read ended in "\r": a leading "\n" belongs to it
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume one read of the byte stream; return the events it completed (often none)."""
        text = self._decode(chunk)
        if not text:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return []
        if "\r" in text:
            # A trailing "\r" already ends its line; remember to drop the "\n" of a CRLF split
            # across reads so it does not count as an extra (event-dispatching) blank line.
            self._skip_lf = text[-1] == "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if self._tail:
            text = self._tail + text
        shortcut = self._shortcut
        if shortcut is not None and shortcut.junction:
            parts = text.split(shortcut.junction)
            if len(parts) > 2:
                return self._feed_parts(parts, shortcut)
            if len(parts) == 1 and not self._data and self._event is None:
                single = self._single(text, shortcut)
                if single is not None:
                    return single
        lines = text.split("\n")
        self._tail = lines.pop()
        if not lines:
            return []
        return self._process(lines)

    def _decode(self, chunk: bytes) -> str:
        # Once the stream has begun (no BOM to drop) and nothing of a character is pending, a
        # read that is whole UTF-8 decodes at once; one cut inside a character goes through
        # the incremental decoder, which keeps the cut piece for the next read.
        if self._started and not self._pending:
            try:
                return chunk.decode("utf-8")
            except UnicodeDecodeError:
                pass
        text = self._decoder.decode(chunk)
        self._started = self._started or bool(text)  # it has output text: past any BOM
        self._pending = bool(self._decoder.getstate()[0])
        return text

    def _single(self, text: str, shortcut: Shortcut) -> list[Any] | None:
        """A read that is one whole event of the shortcut's shape and nothing else (a live model
        sends one per write): taken by the shortcut, with no line loop. ``None``: it is not."""
        head, tail = shortcut.head, shortcut.tail
        if len(text) < len(head) + len(tail) or not text.startswith(head) or not text.endswith(tail):
            return None
        self._tail = ""
        part = text[len(head) : len(text) - len(tail)]
        return shortcut.take([part], lambda whole: self._process((head + whole + tail).split("\n")[:-1]))

    def _feed_parts(self, parts: list[str], shortcut: Shortcut) -> list[Any]:
        # The text is parts[0], then for every further part: junction + part. The first part
        # and its event's tail are ordinary lines (the tail ends with a blank line, so nothing
        # is pending after them); the parts in between are whole events, each after a blank
        # line; the last one with its event's head is decoded as usual, its open line kept.
        head, tail = shortcut.head, shortcut.tail
        events = self._process((parts[0] + tail).split("\n")[:-1])
        events += shortcut.take(parts[1:-1], lambda part: self._process((head + part + tail).split("\n")[:-1]))
        lines = (head + parts[-1]).split("\n")
        self._tail = lines.pop()
        if lines:
            events += self._process(lines)
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: finish an unterminated last line and dispatch a pending event.

        The spec discards an event that is not followed by a blank line; we are lenient and
        dispatch it, because some servers close right after ``data: [DONE]``. A genuinely
        truncated JSON payload still fails to parse, so truncation is not hidden.
        """
        text = self._decoder.decode(b"", True)
        if text:
            self._tail += text.replace("\r\n", "\n").replace("\r", "\n")
        lines = self._tail.split("\n") if self._tail else []
        self._tail = ""
        lines.append("")
        return self._process(lines)

    def _process(self, lines: list[str]) -> list[SSEEvent]:
        # The hot path, once per line of every event: a blank line (cheapest test first) ends
        # an event, nearly every other line is a data line, and some providers (Anthropic)
        # name every event. The event name stays in a local between the lines of one read.
        events: list[SSEEvent] = []
        data = self._data
        event = self._event
        for line in lines:
            if not line:
                if data:
                    events.append(
                        SSEEvent(
                            "\n".join(data) if len(data) > 1 else data[0],
                            event or "message",
                            self._id,
                            self._retry,
                        )
                    )
                    data.clear()
                event = None
                self._retry = None
            elif line.startswith("data:"):
                value = line[5:]
                data.append(value[1:] if value[:1] == " " else value)
            elif line.startswith("event:"):
                value = line[6:]
                event = value[1:] if value[:1] == " " else value
            elif line[0] == ":":
                continue  # a comment / keep-alive
            else:
                self._event = event
                self._field(line)
                event = self._event
        self._event = event
        return events

    def _field(self, line: str) -> None:
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":  # "data" without a colon: an empty data line
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        # any other field name is ignored, as the spec requires


async def aiter_sse(byte_stream: AsyncIterable[bytes]) -> AsyncGenerator[SSEEvent, None]:
    """Decode an async byte stream (e.g. ``httpx.Response.aiter_bytes()``) into events."""
    async with aclosing(aiter_sse_batches(byte_stream)) as batches:
        async for batch in batches:
            for event in batch:
                yield event


async def aiter_sse_batches(
    byte_stream: AsyncIterable[bytes], shortcut: Shortcut | None = None
) -> AsyncGenerator[list[Any], None]:
    """The events of an async byte stream, a list per read (never empty); with a ``shortcut``,
    what it made of the events it recognised stands in their place.

    The hot path of a model stream iterates these lists itself: one generator step per
    network read instead of one per event is a measurable share of a token's cost.
    """
    decoder = SSEDecoder(shortcut)
    feed = decoder.feed
    try:
        async for chunk in byte_stream:
            events = feed(chunk)
            if events:
                yield events
        events = decoder.flush()
        if events:
            yield events
    finally:
        # A consumer that stops early (at [DONE], or on an error) must not leave the byte
        # stream's generators to the garbage collector.
        close = getattr(byte_stream, "aclose", None)
        if close is not None:
            await close()
