"""Pre-output retries: what is retried, how long it waits, and that output is never repeated."""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import httpx
import pytest

from tests.loopback import LoopbackServer, Reply, sse_body  # noqa: F401
from tests.support.wire import FAST, text_of
from think_core.errors import ProviderError
from think_core.events import Finish, TextDelta
from think_core.models.base import ModelRequest, UserMessage
from think_core.models.openai import OpenAIChatModel
from think_core.models.retry import RetryPolicy, is_retryable, parse_retry_after, stream_with_retry


def bare_oa_text(text: str = "ok") -> str:
    chunk = lambda delta, finish=None: {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # noqa: E731
    return sse_body(chunk({"content": text}), chunk({}, "stop"), done=True)


def model(server: LoopbackServer, **kwargs: Any) -> OpenAIChatModel:
    kwargs.setdefault("retry_policy", FAST)
    return OpenAIChatModel("gpt-4o", base_url=server.url + "/v1", api_key="sk-test", **kwargs)


async def stream_all(m: OpenAIChatModel, seen: list[Any] | None = None) -> list[Any]:
    events = seen if seen is not None else []
    request = ModelRequest(messages=[UserMessage(content="hi")])
    async with aclosing(m.stream(request)) as stream:
        async for event in stream:
            events.append(event)
    return events


RATE_LIMIT = {"error": {"message": "Rate limit reached for gpt-4o", "type": "tokens", "code": "rate_limit_exceeded"}}
SERVER_ERROR = {"error": {"message": "The server had an error processing your request.", "type": "server_error"}}


# -- over the wire ---------------------------------------------------------------------------------


async def test_429_with_retry_after_seconds_waits_then_succeeds(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json(RATE_LIMIT, status=429, headers={"retry-after": "1"}), Reply.sse(bare_oa_text("done")))
    start = time.monotonic()
    events = await stream_all(model(loopback, retry_policy=RetryPolicy()))  # default backoff would be < 0.5 s
    elapsed = time.monotonic() - start
    assert elapsed >= 0.9
    assert text_of(events) == "done"
    assert len(loopback.requests) == 2


async def test_retry_after_ms_takes_precedence(loopback: LoopbackServer) -> None:
    headers = {"retry-after-ms": "300", "retry-after": "30"}
    loopback.enqueue(Reply.json(RATE_LIMIT, status=429, headers=headers), Reply.sse(bare_oa_text()))
    start = time.monotonic()
    await stream_all(model(loopback))
    elapsed = time.monotonic() - start
    assert elapsed >= 0.28
    assert elapsed < 10  # the 30 s of retry-after were not used
    assert len(loopback.requests) == 2


async def test_500_twice_then_200_succeeds(loopback: LoopbackServer) -> None:
    loopback.enqueue(
        Reply.json(SERVER_ERROR, status=500), Reply.json(SERVER_ERROR, status=502), Reply.sse(bare_oa_text("third"))
    )
    events = await stream_all(model(loopback))
    assert text_of(events) == "third"
    assert isinstance(events[-1], Finish)
    assert len(loopback.requests) == 3
    assert loopback.requests[0].json == loopback.requests[2].json  # the same request, re-sent


async def test_retries_are_bounded_by_max_retries(loopback: LoopbackServer) -> None:
    loopback.enqueue(*[Reply.json(SERVER_ERROR, status=500) for _ in range(3)], Reply.sse(bare_oa_text()))
    with pytest.raises(ProviderError) as info:
        await stream_all(model(loopback))
    assert info.value.status == 500
    assert len(loopback.requests) == 3  # 1 + max_retries


async def test_max_retries_zero_makes_one_request(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json(SERVER_ERROR, status=503), Reply.sse(bare_oa_text()))
    with pytest.raises(ProviderError):
        await stream_all(model(loopback, retry_policy=None, max_retries=0))
    assert len(loopback.requests) == 1


async def test_401_fails_at_once_with_a_clear_message(loopback: LoopbackServer) -> None:
    body = {"error": {"message": "Incorrect API key provided: sk-test.", "type": "invalid_request_error",
                      "code": "invalid_api_key"}}
    loopback.enqueue(Reply.json(body, status=401), Reply.sse(bare_oa_text()))
    with pytest.raises(ProviderError) as info:
        await stream_all(model(loopback))
    assert info.value.status == 401
    assert info.value.code == "invalid_api_key"
    assert "Incorrect API key provided" in str(info.value)
    assert "check the API key" in info.value.message  # the hint says what to fix
    assert len(loopback.requests) == 1


async def test_retry_after_beyond_the_cap_is_not_retried(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json(RATE_LIMIT, status=429, headers={"retry-after": "86400"}), Reply.sse(bare_oa_text()))
    start = time.monotonic()
    with pytest.raises(ProviderError) as info:
        await stream_all(model(loopback, retry_policy=None, retry_cap_seconds=60))
    assert info.value.status == 429
    assert len(loopback.requests) == 1
    assert time.monotonic() - start < 5


async def test_x_should_retry_false_overrides_the_status(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json(SERVER_ERROR, status=500, headers={"x-should-retry": "false"}), Reply.sse(bare_oa_text()))
    with pytest.raises(ProviderError):
        await stream_all(model(loopback))
    assert len(loopback.requests) == 1


@pytest.mark.parametrize("reset", [False, True])
async def test_connection_dropped_before_the_response_is_retried(loopback: LoopbackServer, reset: bool) -> None:
    loopback.enqueue(Reply(no_response=True, reset=reset), Reply.sse(bare_oa_text("after reconnect")))
    events = await stream_all(model(loopback))
    assert text_of(events) == "after reconnect"
    assert len(loopback.requests) == 2


async def test_read_timeout_before_output_is_retried(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(bare_oa_text("late"), chunk_delay=0.0), Reply.sse(bare_oa_text("on time")))
    loopback.replies[0].delay = 1.0  # headers arrive after the read timeout
    events = await stream_all(model(loopback, timeout=httpx.Timeout(0.3)))
    assert text_of(events) == "on time"
    assert len(loopback.requests) == 2


async def test_in_stream_error_before_any_output_is_retried(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(sse_body(SERVER_ERROR, done=True)), Reply.sse(bare_oa_text("second")))
    events = await stream_all(model(loopback))
    assert text_of(events) == "second"
    assert len(loopback.requests) == 2


async def test_in_stream_error_of_a_fatal_type_is_not_retried(loopback: LoopbackServer) -> None:
    bad = {"error": {"message": "Your input exceeds the context window", "type": "invalid_request_error",
                     "code": "context_length_exceeded"}}
    loopback.enqueue(Reply.sse(sse_body(bad, done=True)), Reply.sse(bare_oa_text()))
    with pytest.raises(ProviderError) as info:
        await stream_all(model(loopback))
    assert info.value.code == "context_length_exceeded"
    assert len(loopback.requests) == 1


@pytest.mark.parametrize("reset", [False, True])
async def test_connection_lost_after_first_text_is_not_retried(loopback: LoopbackServer, reset: bool) -> None:
    chunk = lambda text: {"id": "c", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}  # noqa: E731
    stream = sse_body(chunk("Hel"), chunk("lo"), chunk(" world"), {"id": "c", "choices": []}, done=True)
    loopback.enqueue(Reply.sse(stream, disconnect_after=2, reset=reset, chunk_delay=0.01), Reply.sse(bare_oa_text()))
    seen: list[Any] = []
    with pytest.raises((httpx.TransportError, ProviderError)):
        await stream_all(model(loopback), seen)
    assert text_of(seen) == "Hello"
    assert len(loopback.requests) == 1


async def test_error_event_after_first_text_is_not_retried(loopback: LoopbackServer) -> None:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": None}]}
    loopback.enqueue(Reply.sse(sse_body(chunk, SERVER_ERROR, done=True)), Reply.sse(bare_oa_text()))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        await stream_all(model(loopback), seen)
    assert info.value.type == "server_error"
    assert seen == [TextDelta("Hello")]
    assert len(loopback.requests) == 1


# -- the policy itself -----------------------------------------------------------------------------


def test_parse_retry_after() -> None:
    assert parse_retry_after({"retry-after-ms": "644", "retry-after": "1"}) == pytest.approx(0.644)
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after(httpx.Headers({"Retry-After": "3"})) == 3.0
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(30, abs=1)
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 30, usegmt=True)}, now=now) is None
    assert parse_retry_after({"retry-after-ms": "soon", "retry-after": "4"}) == 4.0
    assert parse_retry_after({"retry-after": "whenever"}) is None
    assert parse_retry_after({"retry-after": "0"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ProviderError("x", status=408), True),
        (ProviderError("x", status=409), True),
        (ProviderError("x", status=429), True),
        (ProviderError("x", status=500), True),
        (ProviderError("x", status=529), True),
        (ProviderError("x", status=400), False),
        (ProviderError("x", status=401), False),
        (ProviderError("x", status=404), False),
        (ProviderError("x", status=400, headers={"x-should-retry": "true"}), True),
        (ProviderError("x", status=503, headers={"x-should-retry": "false"}), False),
        (ProviderError("x", type="overloaded_error"), True),
        (ProviderError("x", type="invalid_request_error"), False),
        (httpx.ConnectError("refused"), True),
        (httpx.ReadTimeout("slow"), True),
        (httpx.RemoteProtocolError("peer closed"), True),
        (ValueError("bug"), False),
    ],
)
def test_is_retryable(error: BaseException, expected: bool) -> None:
    assert is_retryable(error) is expected


def test_backoff_is_exponential_with_jitter_and_capped() -> None:
    policy = RetryPolicy(initial_delay=0.5, max_delay=8.0)
    for n, base in [(0, 0.5), (1, 1.0), (2, 2.0), (5, 8.0), (10, 8.0)]:
        delays = [policy.backoff(n) for _ in range(200)]
        assert all(0.75 * base <= d <= base for d in delays)
        assert len(set(delays)) > 1


def test_should_retry_respects_the_cap() -> None:
    policy = RetryPolicy(cap_seconds=60)
    assert policy.should_retry(ProviderError("x", status=429, headers={"retry-after": "60"}))
    assert not policy.should_retry(ProviderError("x", status=429, headers={"retry-after": "61"}))


class _Attempt:
    """A fake stream that records whether it was closed."""

    def __init__(self, events: list[Any], error: BaseException | None = None) -> None:
        self.events, self.error, self.closed = events, error, False

    async def gen(self) -> AsyncIterator[Any]:
        try:
            for event in self.events:
                yield event
            if self.error is not None:
                raise self.error
        finally:
            self.closed = True


async def test_stream_with_retry_closes_every_attempt() -> None:
    attempts = [_Attempt([], httpx.ConnectError("x")), _Attempt([], ProviderError("y", status=500)), _Attempt([1, 2])]
    it = iter(attempts)
    out = [e async for e in stream_with_retry(lambda: next(it).gen(), FAST)]
    assert out == [1, 2]
    assert all(a.closed for a in attempts)


async def test_stream_with_retry_empty_stream_and_early_exit() -> None:
    empty = _Attempt([])
    assert [e async for e in stream_with_retry(empty.gen, FAST)] == []
    long = _Attempt([1, 2, 3])
    async with aclosing(stream_with_retry(long.gen, FAST)) as stream:
        assert await stream.__anext__() == 1
    assert long.closed


async def test_stream_with_retry_never_retries_after_the_first_event() -> None:
    calls = []

    def opener() -> AsyncIterator[Any]:
        calls.append(1)
        return _Attempt(["a"], httpx.ReadError("lost")).gen()

    seen = []
    with pytest.raises(httpx.ReadError):
        async for event in stream_with_retry(opener, FAST):
            seen.append(event)
    assert seen == ["a"] and len(calls) == 1
