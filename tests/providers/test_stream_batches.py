"""``stream_batches``: an HTTP provider's events a list per network read (and the closing
``Finish``) — the hot path of a
turn iterates these — with exactly the events, order and failures of ``stream``."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply, sse_body
from tests.support.wire import an_stream, anthropic_model, ask, collect, oa_chunk, oa_text, openai_model
from think_core.errors import ProviderError
from think_core.events import TextDelta


async def batches_of(model: Any, seen: list[list[Any]] | None = None) -> list[list[Any]]:
    batches = seen if seen is not None else []
    async with aclosing(model.stream_batches(ask())) as stream:
        async for batch in stream:
            batches.append(list(batch))
    return batches


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
async def test_one_read_is_one_batch_with_the_events_of_stream(loopback: LoopbackServer, shape: str) -> None:
    body = oa_text("one ", "two ", "three") if shape == "openai" else an_stream(
        {"type": "text", "text": "one two three"}, stop="end_turn", input_tokens=3, output_tokens=3
    )
    make = openai_model if shape == "openai" else anthropic_model
    loopback.enqueue(Reply.sse(body, chunks=[body.encode()]), Reply.sse(body))  # one read; then one per event
    batched = await batches_of(make(loopback))
    one_by_one = await collect(make(loopback), ask())
    # The read's events in one list, then the Finish the mapper makes at the end of the stream.
    assert [[e.type for e in batch] for batch in batched] == [[e.type for e in one_by_one[:-1]], ["finish"]]
    assert [repr(e) for batch in batched for e in batch] == [repr(e) for e in one_by_one]


async def test_a_bad_event_comes_after_the_events_read_before_it(loopback: LoopbackServer) -> None:
    good = sse_body(oa_chunk({"content": "kept "}), oa_chunk({"content": "too"}))
    body = good + "data: {not json\n\n"
    loopback.enqueue(Reply.sse(body, chunks=[body.encode()]))
    seen: list[list[Any]] = []
    with pytest.raises(ProviderError):
        await batches_of(openai_model(loopback), seen)
    # The text read before the bad event was streamed first: the failure is one after output.
    assert [[e.text for e in batch if isinstance(e, TextDelta)] for batch in seen] == [["kept ", "too"]]
