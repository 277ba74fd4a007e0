"""The step retry and the transport retry share one backoff rule (``models.retry.backoff_delay``)."""

from __future__ import annotations

from think_core.errors import ProviderError
from think_core.policy import RetryConfig, step_retry_delay


def test_exponential_with_jitter_capped_at_max_delay() -> None:
    policy = RetryConfig(initial_delay=1.0, max_delay=3.0)
    for attempt, base in ((1, 1.0), (2, 2.0), (3, 3.0), (6, 3.0)):
        for _ in range(50):
            delay = step_retry_delay(RuntimeError("x"), attempt, policy)
            assert 0.75 * base <= delay <= base


def test_retry_after_from_the_provider_is_honoured_up_to_the_cap() -> None:
    error = ProviderError("rate limited", status=429, headers={"retry-after": "2"})
    assert step_retry_delay(error, 1, RetryConfig(initial_delay=0.1, max_delay=20)) == 2.0
    assert step_retry_delay(error, 1, RetryConfig(initial_delay=0.1, max_delay=1.5)) == 1.5
    assert step_retry_delay(error, 1, RetryConfig(initial_delay=0.1, max_delay=20, max_retry_after=0.5)) == 0.5


def test_base_delay_is_accepted_as_the_older_spelling() -> None:
    assert RetryConfig.model_validate({"base_delay": 0.25}).initial_delay == 0.25
    assert RetryConfig.model_validate({"base_delay": 0.25}).base_delay == 0.25
