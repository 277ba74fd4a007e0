"""Pre-output retries for streaming model calls.

A failed model call may be retried only while nothing has reached the caller: once a token
has been yielded, a retry would duplicate output the user has already seen, so later errors
are raised as they are. Before that point, the conventions of the official SDKs apply:
retry transport errors and HTTP 408/409/429/5xx (529 included), honour ``retry-after-ms`` /
``retry-after`` (seconds or an HTTP date) up to a cap, otherwise exponential backoff with
jitter; two retries by default.

A server-directed wait *longer* than the cap is not shortened and retried: the server has said
earlier retries will fail (Azure answers a daily quota with ``retry-after: 86400``), so the
error is raised at once, as openai-python does.
"""

from __future__ import annotations

import email.utils
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
)

from ..errors import ProviderError

__all__ = [
    "RETRYABLE_STATUSES",
    "RETRY_LISTENER",
    "RetryNotice",
    "RetryPolicy",
    "backoff_delay",
    "error_retry_after",
    "is_retryable",
    "parse_retry_after",
    "stream_with_retry",
]

E = TypeVar("E")

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Plus every status >= 500 (which includes Anthropic's 529 "overloaded")."""

# In-stream errors carry no HTTP status; these error types/codes mean "try again later".
_RETRYABLE_STREAM_TYPES = frozenset(
    {
        "server_error",
        "api_error",
        "overloaded_error",
        "rate_limit_error",
        "rate_limit_exceeded",
        "timeout_error",
        "incomplete_stream",
        "invalid_stream",
        "unavailable",  # Google's status names, for an error chunk inside a Gemini stream
        "internal",
        "resource_exhausted",
        "deadline_exceeded",
    }
)


_MAX_DOUBLINGS = 64
"""Beyond this the doubling is far past any ``max_delay``; bounding it keeps the float finite."""


def backoff_delay(
    attempt: int,
    *,
    initial_delay: float,
    max_delay: float,
    retry_after: float | None = None,
    max_retry_after: float | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt`` (1 for the first retry).

    A positive ``retry_after`` (the server's hint, see :func:`parse_retry_after`) is honoured,
    bounded by ``max_retry_after`` when one is given. Otherwise the delay doubles from
    ``initial_delay`` per attempt up to ``max_delay`` (tenacity's ``wait_exponential`` rule),
    then is multiplied by a jitter factor in [0.75, 1] so that clients failing together do not
    retry together and the delay never exceeds ``max_delay``.
    """
    if retry_after is not None and retry_after > 0:
        return retry_after if max_retry_after is None else min(retry_after, max_retry_after)
    doublings = min(max(attempt - 1, 0), _MAX_DOUBLINGS)
    base: float = min(initial_delay * 2.0**doublings, max_delay)
    return base * (1 - 0.25 * random.random())


def error_retry_after(error: BaseException | None) -> float | None:
    """The wait an error's response asked for, or ``None`` without a usable hint: its headers,
    else a ``RetryInfo`` in its body (Google sends ``"retryDelay": "34.4s"`` and no header)."""
    headers = getattr(error, "headers", None)
    delay = parse_retry_after(headers) if headers else None
    return delay if delay is not None else _body_retry_delay(getattr(error, "body", None))


_RETRY_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def _body_retry_delay(body: object) -> float | None:
    """``error.details[].retryDelay`` of a Google error body, in seconds."""
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else ():
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        match = _RETRY_DELAY.match(delay) if isinstance(delay, str) else None
        if match and float(match[1]) > 0:
            return float(match[1])
    return None


@dataclass(frozen=True, slots=True, init=False)
class RetryPolicy:
    """How often and how long the transport retries. ``max_retries`` counts retries (attempts - 1).

    ``max_retry_after`` bounds a server-directed wait: a longer one is not retried at all.
    ``initial_delay``/``max_delay`` shape the backoff used when the server gives no hint
    (0.5 s, 1 s, 2 s ... up to 8 s, see :func:`backoff_delay`). ``cap_seconds`` is the former
    name of ``max_retry_after`` and still accepted.
    """

    max_retries: int
    max_retry_after: float
    initial_delay: float
    max_delay: float

    def __init__(
        self,
        max_retries: int = 2,
        max_retry_after: float = 60.0,
        initial_delay: float = 0.5,
        max_delay: float = 8.0,
        *,
        cap_seconds: float | None = None,
    ) -> None:
        object.__setattr__(self, "max_retries", max_retries)
        object.__setattr__(self, "max_retry_after", max_retry_after if cap_seconds is None else cap_seconds)
        object.__setattr__(self, "initial_delay", initial_delay)
        object.__setattr__(self, "max_delay", max_delay)

    @property
    def cap_seconds(self) -> float:
        return self.max_retry_after

    def backoff(self, retry_number: int) -> float:
        """Delay before retry ``retry_number`` (0-based) when the server gave no hint."""
        return backoff_delay(retry_number + 1, initial_delay=self.initial_delay, max_delay=self.max_delay)

    def server_delay(self, error: BaseException) -> float | None:
        """The wait the server asked for, or ``None`` when it gave no usable hint."""
        return error_retry_after(error) if isinstance(error, ProviderError) else None

    def should_retry(self, error: BaseException) -> bool:
        """Whether ``error`` (raised before any output) deserves another attempt."""
        if not is_retryable(error):
            return False
        hint = self.server_delay(error)
        return hint is None or hint <= self.max_retry_after

    def wait(self, state: RetryCallState) -> float:
        """tenacity ``wait`` callback: the server's hint when present, else backoff."""
        error = state.outcome.exception() if state.outcome else None
        return backoff_delay(
            state.attempt_number,
            initial_delay=self.initial_delay,
            max_delay=self.max_delay,
            retry_after=self.server_delay(error) if error is not None else None,
            max_retry_after=self.max_retry_after,
        )


def is_retryable(error: BaseException) -> bool:
    """Transport errors, retryable HTTP statuses, and transient in-stream error types."""
    if isinstance(error, httpx.TransportError):  # connect/read/write errors, timeouts, resets
        return True
    if not isinstance(error, ProviderError):
        return False
    override = (_header(error.headers, "x-should-retry") or "").lower()
    if override == "true":
        return True
    if override == "false":
        return False
    if error.status is not None:
        return error.status in RETRYABLE_STATUSES or error.status >= 500
    return (error.type or "").lower() in _RETRYABLE_STREAM_TYPES or (
        error.code or ""
    ).lower() in _RETRYABLE_STREAM_TYPES


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (float ms), else ``retry-after`` (float seconds
    or an HTTP date). ``None`` when absent, unparsable or not positive."""
    if not headers:
        return None
    raw_ms = _header(headers, "retry-after-ms")
    if raw_ms:
        try:
            seconds = float(raw_ms) / 1000
        except ValueError:
            seconds = None
        if seconds is not None and seconds > 0:
            return seconds
    raw = _header(headers, "retry-after")
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        parsed = email.utils.parsedate_tz(raw)
        if parsed is None:
            return None
        seconds = email.utils.mktime_tz(parsed) - (time.time() if now is None else now)
    return seconds if seconds > 0 else None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup (plain dicts may keep the server's capitalisation)."""
    value = headers.get(name)
    if value is None and not isinstance(headers, httpx.Headers):
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return None if value is None else value.strip()


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """A retry about to happen: retry number ``attempt`` (1 for the first) after ``delay``
    seconds, because of ``error``."""

    attempt: int
    delay: float
    error: BaseException


#: Told of each pre-output retry before its wait, so that whoever streams the step can show
#: it (a retry honouring ``retry-after: 20`` would otherwise look like a hung turn).
RETRY_LISTENER: ContextVar[Callable[[RetryNotice], None] | None] = ContextVar("think_retry_listener", default=None)


def _notify(state: RetryCallState) -> None:
    listener = RETRY_LISTENER.get()
    if listener is None or state.outcome is None or state.next_action is None:
        return
    error = state.outcome.exception()
    if error is not None:
        listener(RetryNotice(state.attempt_number, state.next_action.sleep, error))


def stream_with_retry(open_stream: Callable[[], AsyncIterator[E]], policy: RetryPolicy) -> AsyncIterator[E]:
    """Yield the events of ``open_stream()``, re-opening it on a retryable error raised
    before its first event; after the first event every error propagates unchanged.

    Each attempt's iterator is closed (``aclose``) when it fails, when the stream ends and
    when the consumer stops early, so the HTTP response behind it is always released.
    """
    return _RetriedStream(open_stream, policy)


class _RetriedStream(Generic[E]):
    """:func:`stream_with_retry`'s iterator. Once the first event is in, ``__anext__`` hands out
    the attempt's own ``__anext__``: no frame of its own per event (a generator here would be
    one more layer resumed twice per network read of a live stream)."""

    __slots__ = ("_open", "_policy", "_stream", "_first", "_state")

    def __init__(self, open_stream: Callable[[], AsyncIterator[E]], policy: RetryPolicy) -> None:
        self._open = open_stream
        self._policy = policy
        self._stream: AsyncIterator[E] | None = None
        self._first: E | None = None
        self._state = "new"  # new → first (the first event waits) → streaming | ended

    def __aiter__(self) -> _RetriedStream[E]:
        return self

    def __anext__(self) -> Awaitable[E]:
        if self._state == "streaming":
            assert self._stream is not None
            return self._stream.__anext__()
        return self._next()

    async def _next(self) -> E:
        if self._state == "new":
            self._state = "ended"  # until the first event is in (a failure leaves it so)
            first, empty = await self._first_event()
            if empty:
                raise StopAsyncIteration
            self._state = "streaming"
            return first
        raise StopAsyncIteration

    async def _first_event(self) -> tuple[E, bool]:
        # The first attempt runs without tenacity: its machinery costs every step CPU, and almost
        # every step succeeds at once. A failure is handed to tenacity as its first attempt's, so
        # what is retried, how often and after which wait is tenacity's policy as before.
        failed: BaseException | None = None
        try:
            return await self._attempt(), False
        except StopAsyncIteration:
            return cast(E, None), True
        except BaseException as exc:
            failed = exc
        policy = self._policy
        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.max_retries + 1),
            wait=policy.wait,
            retry=retry_if_exception(policy.should_retry),
            before_sleep=_notify,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if failed is not None:
                    error, failed = failed, None
                    raise error
                try:
                    return await self._attempt(), False
                except StopAsyncIteration:
                    return cast(E, None), True
        raise AssertionError("unreachable: tenacity reraises the last failure")  # pragma: no cover

    async def _attempt(self) -> E:
        stream = self._stream = self._open()
        try:
            return await stream.__anext__()
        except BaseException:
            self._stream = None
            await _aclose(stream)
            raise

    async def aclose(self) -> None:
        self._state = "ended"
        stream, self._stream = self._stream, None
        if stream is not None:
            await _aclose(stream)


async def _aclose(stream: AsyncIterator[object]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
