"""The text-delta fast path: events of a learned shape are taken without a JSON parse, and a
stream maps to exactly the same model events with the fast path as without it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from think_core.models._wire import TextEventShape
from think_core.models.anthropic import _MessageMapper
from think_core.models.openai import _ChunkMapper
from think_core.models.sse import SSEEvent

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


def test_a_learned_shape_takes_plain_text_and_refuses_the_rest() -> None:
    shape = TextEventShape()
    first = oa({"content": "Hello"}).data
    assert shape.match(first) is None  # nothing learned yet
    shape.learn(first, "content", "Hello")
    assert shape.match(oa({"content": " there"}).data) == " there"
    for other in ["line\nbreak", 'say "hi"', "back\\slash", "", "café", "tab\there"]:
        assert shape.match(oa({"content": other}).data) is None, other
    assert shape.match(oa({"content": "x", "refusal": "y"}).data) is None
    assert shape.match(oa({"content": "x"}, "stop").data) is None
    assert shape.match("[DONE]") is None


def test_a_shape_is_learned_only_from_text_it_can_find_verbatim() -> None:
    shape = TextEventShape()
    escaped = oa({"content": "line\nbreak"}).data
    shape.learn(escaped, "content", "line\nbreak")  # its JSON spelling differs: nothing learned
    assert shape.match(oa({"content": "plain"}).data) is None
    twice = json.dumps({"a": {"content": "x"}, "b": {"content": "x"}})
    shape.learn(twice, "content", "x")  # ambiguous: nothing learned
    assert shape.match(twice) is None
