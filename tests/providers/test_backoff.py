"""One backoff function for every retry: ``backoff_delay`` and the transport policy built on it."""

from __future__ import annotations

import math
from typing import Any

import pytest
from tenacity import RetryCallState

from think_core.errors import ProviderError
from think_core.models.retry import RetryPolicy, backoff_delay, error_retry_after


def delays(attempt: int, n: int = 300, **kwargs: Any) -> list[float]:
    return [backoff_delay(attempt, **{"initial_delay": 0.5, "max_delay": 8.0, **kwargs}) for _ in range(n)]


@pytest.mark.parametrize(("attempt", "base"), [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0), (6, 8.0), (40, 8.0)])
def test_doubles_per_attempt_with_jitter_never_above_max_delay(attempt: int, base: float) -> None:
    seen = delays(attempt)
    assert all(0.75 * base <= d <= base for d in seen)
    assert len(set(seen)) > 1  # jittered, so clients that failed together spread out


def test_the_first_retry_waits_about_initial_delay() -> None:
    assert all(0.75 <= d <= 1.0 for d in delays(1, initial_delay=1.0, max_delay=20.0))


def test_attempt_zero_or_below_is_treated_as_the_first() -> None:
    assert all(0.375 <= d <= 0.5 for d in delays(0) + delays(-3))


def test_a_huge_attempt_number_stays_finite() -> None:
    assert all(math.isfinite(d) and d <= 8.0 for d in delays(10_000, n=5))


def test_zero_delays_mean_retry_at_once() -> None:
    assert delays(3, initial_delay=0.0) == [0.0] * 300


def test_retry_after_is_honoured_without_jitter() -> None:
    assert backoff_delay(1, initial_delay=0.5, max_delay=8.0, retry_after=3.0) == 3.0
    # The server's hint may exceed the backoff's own cap: it knows when it will answer.
    assert backoff_delay(1, initial_delay=0.5, max_delay=8.0, retry_after=30.0) == 30.0


def test_retry_after_is_bounded_by_max_retry_after() -> None:
    assert backoff_delay(2, initial_delay=0.5, max_delay=20.0, retry_after=90.0, max_retry_after=20.0) == 20.0
    assert backoff_delay(2, initial_delay=0.5, max_delay=20.0, retry_after=5.0, max_retry_after=20.0) == 5.0


@pytest.mark.parametrize("hint", [None, 0.0, -1.0])
def test_no_usable_retry_after_falls_back_to_backoff(hint: float | None) -> None:
    assert all(0.75 <= d <= 1.0 for d in delays(2, retry_after=hint, max_retry_after=60.0))


def test_error_retry_after_reads_any_error_with_headers() -> None:
    assert error_retry_after(ProviderError("x", status=429, headers={"retry-after-ms": "1500"})) == 1.5
    assert error_retry_after(ProviderError("x", status=429, headers={"Retry-After": "2"})) == 2.0
    assert error_retry_after(ProviderError("x", status=500)) is None
    assert error_retry_after(ValueError("no headers")) is None
    assert error_retry_after(None) is None


def test_policy_uses_one_vocabulary_and_accepts_the_former_cap_name() -> None:
    policy = RetryPolicy(max_retry_after=30.0, initial_delay=0.1, max_delay=1.0)
    assert (policy.max_retry_after, policy.cap_seconds) == (30.0, 30.0)
    assert RetryPolicy(cap_seconds=5.0).max_retry_after == 5.0
    assert RetryPolicy(cap_seconds=5.0) == RetryPolicy(max_retry_after=5.0)
    with pytest.raises(AttributeError):
        policy.max_delay = 3.0  # type: ignore[misc]


def _state(attempt: int, error: BaseException) -> RetryCallState:
    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = attempt
    state.set_exception((type(error), error, None))
    return state


def test_policy_wait_is_backoff_delay_with_the_servers_hint() -> None:
    policy = RetryPolicy(max_retry_after=60.0, initial_delay=0.5, max_delay=8.0)
    hinted = ProviderError("slow down", status=429, headers={"retry-after": "7"})
    assert policy.wait(_state(1, hinted)) == 7.0
    plain = ProviderError("overloaded", status=529)
    assert all(1.5 <= policy.wait(_state(3, plain)) <= 2.0 for _ in range(50))


def test_policy_backoff_is_zero_based_over_the_same_function() -> None:
    policy = RetryPolicy(initial_delay=0.5, max_delay=8.0)
    assert all(0.375 <= policy.backoff(0) <= 0.5 for _ in range(50))
    assert all(3.0 <= policy.backoff(3) <= 4.0 for _ in range(50))
