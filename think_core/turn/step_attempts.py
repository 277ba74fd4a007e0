"""The model step of a turn with its retry: a step that fails with a ``transient`` or
``rate_limit`` error before any output is streamed again after a delay, each retry shown to
the client as a ``data-think-retry`` chunk (the provider's own pre-output retries too)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from ..models.base import ModelRequest
from ..models.retry import RETRY_LISTENER, RetryNotice, is_retryable
from ..policy import RetryConfig, step_retry_delay
from ..types import ChatErrorContext, StepResult
from .request import TurnFailed
from .step_stream import CallIds, StepStreamError, stream_step
from .ui_stream import AssistantMessageBuilder

if TYPE_CHECKING:
    from ..hooks.dispatch import HookDispatcher


class _Policies(Protocol):
    @property
    def retry(self) -> RetryConfig: ...

logger = logging.getLogger("think.turn")

__all__ = ["RetriedSteps"]


class RetriedSteps:
    """Streams a turn's model steps, retried by the turn's retry policy (mixed into ``Turn``)."""

    deps: _Policies
    hooks: HookDispatcher
    session: Any
    request_id: str
    body: dict[str, Any] | None
    builder: AssistantMessageBuilder
    call_ids: CallIds
    invalid_inputs: dict[str, str]

    async def _stream_step_with_retry(self, step_number: int, model: Any, request: ModelRequest) -> StepResult:
        """Stream one step; a ``transient`` / ``rate_limit`` failure before any output is retried."""
        policy = self.deps.retry
        transport_retries = getattr(model, "retries_before_output", False)
        observers = self.hooks.chunk_observers
        attempt = 0
        while True:
            try:
                return await self._stream_step(step_number, model, request, observers)
            except StepStreamError as error:
                failure = TurnFailed(error.error, "stream", error.streamed)
                if failure.streamed:
                    raise failure from error.error
                failure.classification = await self.hooks.classify_chat_error(
                    failure.error,
                    ChatErrorContext(
                        session=self.session,
                        request_id=self.request_id,
                        stage="stream",
                        messages_persisted=True,
                        body=self.body,
                    ),
                )
                failure.classified = True
                if failure.classification not in ("transient", "rate_limit") or attempt >= policy.max_retries:
                    raise failure from error.error
                if transport_retries and is_retryable(failure.error):
                    # The provider already retried this one; retrying again multiplies attempts.
                    raise failure from error.error
                attempt += 1
                delay = step_retry_delay(failure.error, attempt, policy)
                logger.info("step %d failed (%s); retry %d in %.2fs", step_number, failure.classification, attempt, delay)
                self.builder.finish_step()
                self._retry_notice(RetryNotice(attempt, delay, failure.error), classification=failure.classification)
                await asyncio.sleep(delay)

    async def _stream_step(self, step_number: int, model: Any, request: ModelRequest, observers: tuple[Any, ...]) -> StepResult:
        # The provider's own pre-output retries are shown like the step's.
        listening = RETRY_LISTENER.set(self._retry_notice)
        try:
            return await stream_step(
                model,
                request,
                step_number=step_number,
                session=self.session,
                request_id=self.request_id,
                builder=self.builder,
                call_ids=self.call_ids,
                invalid_inputs=self.invalid_inputs,
                emit_chunk=self.hooks.emit_chunk,
                observers=observers,
                body=self.body,
            )
        finally:
            RETRY_LISTENER.reset(listening)

    def _retry_notice(self, notice: RetryNotice, *, classification: str | None = None) -> None:
        """A ``data-think-retry`` chunk: which retry waits how long, after which error."""
        error, status = notice.error, getattr(notice.error, "status", None)
        self.builder.data("think-retry", {
            "attempt": notice.attempt, "delay": round(notice.delay, 3), "classification": classification,
            "status": status if isinstance(status, int) else None, "error": str(error) or type(error).__name__,
        })

