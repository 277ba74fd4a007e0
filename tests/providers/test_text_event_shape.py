"""The text-delta fast path: events of a learned shape are taken without a JSON parse (one by
one by the mapper, or a run at a time by the SSE decoder), and a stream maps to exactly the same
model events with the fast path as without it, however its reads are cut."""

from __future__ import annotations

import json
import random
import string
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.loopback import LoopbackServer, Reply
from tests.support.wire import anthropic_model, ask, collect, openai_model, text_of
from think_core.models._wire import TextEventShape
from think_core.models.anthropic import _MessageMapper
from think_core.models.openai import _ChunkMapper
from think_core.models.sse import SSEDecoder, SSEEvent

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "m"}


def oa(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> SSEEvent:
    body = {**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return SSEEvent(json.dumps(body, separators=(",", ":")))


def an(payload: dict[str, Any]) -> SSEEvent:
    return SSEEvent(json.dumps(payload, separators=(",", ":")), payload["type"])


def text(value: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": value}}


# Texts that must not take the fast path wrongly: escapes, quotes, control characters, empty,
# non-ASCII (escaped by json.dumps), and text that looks like the JSON around it.
TRICKY = ["Hello", " world", "", "line\nbreak", 'say "hi"', "back\\slash", "tab\there", "café",
          '","finish_reason":"stop', "}]}", "plain", " again"]

OPENAI_STREAM = [
    oa({"role": "assistant", "content": ""}),
    *(oa({"content": t}) for t in TRICKY),
    oa({"content": "with reasoning", "reasoning_content": "think"}),
    oa({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]}),
    oa({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":1}"}}]}),
    oa({"content": "after"}),
    SSEEvent(json.dumps({**HEAD, "id": "other-id", "choices": [{"index": 0, "delta": {"content": "new id"},
                                                                   "finish_reason": None}]}, separators=(",", ":"))),
    oa({"content": "same shape, finish"}, "stop"),
    oa({}, "stop"),
    SSEEvent(json.dumps({**HEAD, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9,
                                                         "total_tokens": 12}}, separators=(",", ":"))),
    SSEEvent("[DONE]"),
]

ANTHROPIC_STREAM = [
    an({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "c",
                                             "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}}),
    an({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    *(an(text(t)) for t in TRICKY),
    an({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "other block"}}),
    an({"type": "content_block_stop", "index": 0}),
    an({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 20}}),
    an({"type": "message_stop"}),
]


class _NeverShape(TextEventShape):
    def match(self, data: str) -> str | None:
        return None

    def learn(self, event: str, data: str, key: str, text: str, ignored: Any = None) -> None:
        return None


class _CountingShape(TextEventShape):
    hits = 0

    def match(self, data: str) -> str | None:
        found = super().match(data)
        self.hits += found is not None
        return found


def mapped(mapper: Any, stream: list[SSEEvent], fast: bool) -> list[Any]:
    mapper.text_shape = _CountingShape() if fast else _NeverShape()
    events: list[Any] = []
    for sse in stream:
        events.extend(mapper.on_event(sse))
    events.extend(mapper.finish())
    return events


@pytest.mark.parametrize(
    ("make", "stream"),
    [(lambda: _ChunkMapper("openai", "m"), OPENAI_STREAM), (lambda: _MessageMapper("anthropic", "c", None), ANTHROPIC_STREAM)],
    ids=["openai", "anthropic"],
)
def test_a_stream_maps_to_the_same_events_with_and_without_the_fast_path(make: Any, stream: list[SSEEvent]) -> None:
    fast_mapper = make()
    fast, slow = mapped(fast_mapper, stream, fast=True), mapped(make(), stream, fast=False)
    assert fast == slow
    assert fast_mapper.text_shape.hits >= 3  # " world", "plain", " again" took the fast path
    texts = [e.text for e in fast if e.type == "text-delta"]
    assert "line\nbreak" in texts and 'say "hi"' in texts and "café" in texts and "" not in texts
    assert fast_mapper.text_shape.junction  # and the decoder may now take such events whole


def test_a_learned_shape_takes_its_events_text_and_refuses_the_rest() -> None:
    shape = TextEventShape()
    first = oa({"content": "Hello"}).data
    assert shape.match(first) is None  # nothing learned yet
    shape.learn("message", first, "content", "Hello")
    assert shape.match(oa({"content": " there"}).data) == " there"
    # Escaped text is decoded as json.loads decodes it; a raw control character is invalid JSON.
    for other in ["line\nbreak", 'say "hi"', "back\\slash", "café", "tab\there", "\u2028", "é\ud800"]:
        assert shape.match(oa({"content": other}).data) == other, other
    assert shape.match(oa({"content": "caf\u00e9"}).data.replace("\\u00e9", "é")) == "café"  # raw UTF-8
    assert shape.match(first.replace("Hello", "a\tb")) is None  # a raw tab: not JSON, parsed (and refused) in full
    assert shape.match(first.replace("Hello", "ends in \\")) is None  # the backslash escapes the closing quote
    assert shape.match(oa({"content": ""}).data) is None  # an empty text is no event
    assert shape.match(oa({"content": "x", "refusal": "y"}).data) is None
    assert shape.match(oa({"content": "x"}, "stop").data) is None
    assert shape.match(first.replace("Hello", 'x","refusal":"y')) is None
    assert shape.match("[DONE]") is None


def test_a_shape_is_learned_only_from_text_it_can_find_verbatim() -> None:
    shape = TextEventShape()
    escaped = oa({"content": "line\nbreak"}).data
    shape.learn("message", escaped, "content", "line\nbreak")  # its JSON spelling differs: nothing learned
    assert shape.match(oa({"content": "plain"}).data) is None and shape.junction == ""
    twice = json.dumps({"a": {"content": "x"}, "b": {"content": "x"}})
    shape.learn("message", twice, "content", "x")  # ambiguous: nothing learned
    assert shape.match(twice) is None
    shape.learn("message", '{"content":\n"x"}', "content", "x")  # several data lines: nothing learned
    assert shape.junction == ""


def test_the_learned_shape_knows_the_event_on_the_wire() -> None:
    shape = TextEventShape()
    data = an(text("Hi")).data
    shape.learn("content_block_delta", data, "text", "Hi")
    assert shape.head + "Hi" + shape.tail == f"event: content_block_delta\ndata: {data}\n\n"
    assert shape.junction == shape.tail + shape.head
    openai = TextEventShape()
    openai.learn("message", oa({"content": "Hi"}).data, "content", "Hi")
    assert openai.head.startswith("data: {") and openai.tail.endswith("}\n\n")  # no event line


# -- the decoder taking runs of learned events whole ---------------------------------------------

def _frame(shape: str, payload: dict[str, Any], ascii_only: bool) -> str:
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=ascii_only)
    return (f"event: {payload['type']}\n" if shape == "anthropic" else "") + f"data: {data}\n\n"


def _text_payload(shape: str, value: str, index: int = 0) -> dict[str, Any]:
    if shape == "anthropic":
        return {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": value}}
    return {**HEAD, "type": "chunk", "choices": [{"index": index, "delta": {"content": value}, "finish_reason": None}]}


def _pad(frame: str, padding: random.Random) -> str:
    """An OpenAI chunk as OpenAI sends it: with a random ``obfuscation`` string last."""
    value = "".join(padding.choices(string.ascii_letters + string.digits, k=padding.randrange(0, 12)))
    return frame.replace('}\n\n', f',"obfuscation":"{value}"}}\n\n') if frame.startswith("data: {") else frame


def serialise(shape: str, items: list[tuple[str, str]], ascii_only: bool = False, eol: str = "\n",
              padding: random.Random | None = None) -> bytes:
    """A whole stream: its opening events, ``items``, its closing events; with ``padding``,
    OpenAI's chunks carry an ``obfuscation`` string each."""
    if shape == "anthropic":
        opening = [an({"type": "message_start", "message": {"id": "m", "model": "c", "usage": {"input_tokens": 1}}}),
                   an({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})]
        closing = [an({"type": "content_block_stop", "index": 0}),
                   an({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
                   an({"type": "message_stop"})]
        head = "".join(f"event: {e.event}\ndata: {e.data}\n\n" for e in opening)
        tail = "".join(f"event: {e.event}\ndata: {e.data}\n\n" for e in closing)
    else:
        head = ""
        tail = f"data: {oa({}, 'stop').data}\n\ndata: [DONE]\n\n"
    out = [head]
    for kind, value in items:
        frame = _frame(shape, _text_payload(shape, value), ascii_only)
        if kind == "text":
            out.append(frame)
        elif kind == "other-index":  # the same event for another block or choice: another shape
            out.append(_frame(shape, _text_payload(shape, value, 1), ascii_only))
        elif kind == "with-id":  # one line more than the learned event
            out.append("id: 7\n" + frame)
        elif kind == "no-space":  # "data:" without the space: the same event, spelled otherwise
            out.append(frame.replace("event: ", "event:").replace("data: ", "data:"))
        elif kind == "two-lines":  # the payload over two data lines (JSON whitespace between them)
            out.append(frame.replace('","', '",\ndata: "', 1))
        elif kind == "comment":
            out.append(f": {value}\n\n".replace("\n:", "\n: ") if "\n" not in value else ": keep-alive\n\n")
        elif kind == "ping":
            out.append('event: ping\ndata: {"type":"ping"}\n\n' if shape == "anthropic" else ": ping\n\n")
    out.append(tail)
    if padding is not None:
        out = [_pad(frame, padding) for piece in out for frame in piece.split("\n\n")[:-1] for frame in [frame + "\n\n"]]
    return "".join(out).replace("\n", eol).encode()


class _Plain(TextEventShape):
    """The mapper of reference: every event parsed in full."""

    def match(self, data: str) -> str | None:
        return None

    def learn(self, event: str, data: str, key: str, text: str, ignored: Any = None) -> None:
        return None


def decoded(shape: str, stream: bytes, cuts: list[int], shortcut: bool) -> tuple[list[Any], int]:
    """The model events of ``stream`` read in pieces, and how many the decoder took whole."""
    mapper: Any = _MessageMapper("anthropic", "c", None) if shape == "anthropic" else _ChunkMapper("openai", "m")
    if not shortcut:
        mapper.text_shape = _Plain()
    decoder = SSEDecoder(mapper.text_shape if shortcut else None)
    events: list[Any] = []
    taken = 0
    points = sorted({c % (len(stream) + 1) for c in cuts})
    reads = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    # The mapper learns while it maps one read; the decoder uses that from the next read on.
    for read in [*reads, None]:
        for item in decoder.feed(read) if read is not None else decoder.flush():
            if isinstance(item, SSEEvent):
                events += mapper.on_event(item)
            else:
                taken += 1
                events.append(item)
    return events + list(mapper.finish()), taken


TEXTS = st.one_of(
    st.sampled_from(["Hello", " world", "", "café", "日本語", 'say "hi"', "line\nbreak", "ends in \\", "\\", "\u2028",
                     '"}}', '"},"finish_reason":null}]}', "\n\nevent: content_block_delta\ndata: ", "tab\t", "\x7f"]),
    st.text(max_size=6),
)
KINDS = st.sampled_from(["text"] * 12 + ["other-index", "with-id", "no-space", "two-lines", "comment", "ping"])


@settings(max_examples=500, deadline=None, database=None)
@given(shape=st.sampled_from(["anthropic", "openai"]), items=st.lists(st.tuples(KINDS, TEXTS), max_size=40),
       ascii_only=st.booleans(), eol=st.sampled_from(["\n", "\r\n"]),
       cuts=st.lists(st.integers(min_value=0, max_value=100_000), max_size=6),
       padding=st.none() | st.randoms(use_true_random=False))
def test_a_stream_decodes_to_the_same_events_with_and_without_the_shortcut(
    shape: str, items: list[tuple[str, str]], ascii_only: bool, eol: str, cuts: list[int],
    padding: random.Random | None,
) -> None:
    stream = serialise(shape, [("text", "first")] + items, ascii_only, eol, padding)
    learned = stream.index(eol.encode() * 2, stream.index(b"first")) + 2 * len(eol)  # a read ends after it
    fast, taken = decoded(shape, stream, [learned, *cuts], shortcut=True)
    event(f"{shape}{' padded' if padding else ''}: {'some' if taken else 'none'} taken whole")
    assert fast == decoded(shape, stream, [learned, *cuts], shortcut=False)[0]


@pytest.mark.parametrize("shape", ["anthropic", "openai", "openai-padded"])
def test_runs_of_text_events_are_taken_whole_once_the_shape_is_known(shape: str) -> None:
    tricky = ["Hello", " world", 'say "hi"', "", "line\nbreak", "ends in \\", "café", '"}}', "tab\t"]
    items = [("text", "first")] + [("text", t) for t in tricky * 20] + [("ping", ""), ("text", "after")]
    padded = shape.endswith("-padded")
    shape = shape.removesuffix("-padded")
    stream = serialise(shape, items, padding=random.Random(7) if padded else None)
    assert padded == (b'"obfuscation":' in stream)
    first_event_end = stream.index(b"\n\n", stream.index(b"first")) + 2
    events, taken = decoded(shape, stream, [first_event_end], shortcut=True)
    assert events == decoded(shape, stream, [], shortcut=False)[0]
    assert "".join(e.text for e in events if e.type == "text-delta") == "first" + "".join(tricky) * 20 + "after"
    # Every event of the run but its first and last (read with the events around them); the
    # empty texts are no events. Escaped text is decoded as well.
    assert taken == sum(1 for t in tricky * 20 if t) - 2


@pytest.mark.parametrize("shape", ["anthropic", "openai"])
async def test_a_provider_streams_a_long_answer_in_one_write_exactly(shape: str, loopback: LoopbackServer) -> None:
    tricky = ["Hello", " world", 'say "hi"', "", "line\nbreak", "ends in \\", "café", '"}}', "日本"]
    items = [("text", t) for t in tricky * 300]
    body = serialise(shape, items)
    loopback.enqueue(Reply.sse(body, chunks=[body]))
    model = anthropic_model(loopback) if shape == "anthropic" else openai_model(loopback)
    events = await collect(model, ask())
    assert text_of(events) == "".join(tricky) * 300
    assert events[-1].type == "finish" and events[-1].finish_reason == "stop"


def _event_ends(stream: bytes, eol: str) -> list[int]:
    """Where each event of ``stream`` ends: a live model's reads, one event per write."""
    blank = (eol * 2).encode()
    ends, at = [], stream.find(blank)
    while at >= 0:
        ends.append(at + len(blank))
        at = stream.find(blank, at + len(blank))
    return ends


@settings(max_examples=300, deadline=None, database=None)
@given(shape=st.sampled_from(["anthropic", "openai"]), items=st.lists(st.tuples(KINDS, TEXTS), max_size=30),
       ascii_only=st.booleans(), eol=st.sampled_from(["\n", "\r\n"]),
       padding=st.none() | st.randoms(use_true_random=False))
def test_one_event_per_read_decodes_as_without_the_shortcut(
    shape: str, items: list[tuple[str, str]], ascii_only: bool, eol: str, padding: random.Random | None
) -> None:
    """A live model's stream, every read one whole event: the shortcut takes each event of the
    learned shape on its own (no line loop), and the events are exactly those without it."""
    stream = serialise(shape, [("text", "first")] + items, ascii_only, eol, padding)
    cuts = _event_ends(stream, eol)
    fast, taken = decoded(shape, stream, cuts, shortcut=True)
    assert fast == decoded(shape, stream, cuts, shortcut=False)[0]
    if all(kind == "text" for kind, _ in items):  # (another event may teach the mapper another shape)
        plain = sum(1 for _, value in items if value and value.isascii() and value.isprintable()
                    and not any(c in value for c in '"\\'))
        assert taken >= plain  # every plain text event after the first was taken on its own read


def test_a_read_of_one_event_after_a_pending_event_name_is_not_taken_alone() -> None:
    """An ``event:`` line read before the event's data: the next read is that event's rest, not
    a whole event of the learned shape."""
    stream = serialise("anthropic", [("text", "first"), ("text", "second"), ("text", "third")])
    first_end = stream.index(b"\n\n", stream.index(b"first")) + 2
    second_name_end = stream.index(b"\n", first_end) + 1  # "event: content_block_delta\n" alone
    cuts = [first_end, second_name_end, *_event_ends(stream, "\n")]
    assert decoded("anthropic", stream, cuts, shortcut=True)[0] == decoded("anthropic", stream, cuts, shortcut=False)[0]
