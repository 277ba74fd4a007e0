"""What the engine does when a turn goes wrong, as settings: step retries, context-overflow
recovery and what compaction protects. One backoff rule serves the step retry here and the
transport retry of the providers (``models.retry``)."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from .models.retry import backoff_delay, error_retry_after

__all__ = [
    "CompactionConfig",
    "ContextOverflowConfig",
    "ProactiveConfig",
    "RetryConfig",
    "step_retry_delay",
]


class ProactiveConfig(BaseModel):
    """Compact before a step once the previous step's input tokens pass
    ``max_input_tokens * headroom`` (at most ``max_compactions`` times per turn)."""

    max_input_tokens: int = Field(gt=0)
    headroom: float = Field(0.9, gt=0, le=1)
    max_compactions: int = Field(1, ge=1)

    @property
    def threshold(self) -> int:
        return int(self.max_input_tokens * self.headroom)


class ContextOverflowConfig(BaseModel):
    """``Think(context_overflow={...})``: reactive compact-and-retry, and the proactive guard."""

    reactive: bool = False
    max_retries: int = Field(1, ge=0)
    proactive: ProactiveConfig | None = None


class CompactionConfig(BaseModel):
    """Which messages compaction protects, and the summary request's budget."""

    protect_head: int = Field(1, ge=0)
    tail_tokens: int = Field(2000, ge=0)
    min_tail_messages: int = Field(2, ge=1)
    summary_budget_tokens: int = Field(8000, gt=0)


class RetryConfig(BaseModel):
    """Bounded retries of a step that failed with ``"transient"`` / ``"rate_limit"`` before any
    output. The same field names as the providers' transport retry; ``base_delay`` is accepted
    as the older spelling of ``initial_delay``."""

    model_config = ConfigDict(populate_by_name=True)

    max_retries: int = Field(2, ge=0)
    initial_delay: float = Field(0.5, ge=0, validation_alias=AliasChoices("initial_delay", "base_delay"))
    max_delay: float = Field(20.0, ge=0)
    max_retry_after: float | None = Field(default=None, ge=0)

    @property
    def base_delay(self) -> float:
        return self.initial_delay


def step_retry_delay(error: BaseException, attempt: int, policy: RetryConfig) -> float:
    """Seconds before retry ``attempt`` (1-based) of a failed step: the provider's
    ``retry-after`` when it sent one (capped), else exponential backoff with jitter — the same
    rule as the providers' transport retry."""
    cap = policy.max_retry_after if policy.max_retry_after is not None else policy.max_delay
    return backoff_delay(
        attempt,
        initial_delay=policy.initial_delay,
        max_delay=policy.max_delay,
        retry_after=error_retry_after(error),
        max_retry_after=cap,
    )
