"""The model step of a turn with its retry: a step that fails before any output fires
``before_step`` again with ``ctx.retry``; a plugin may move it to another model (fallback),
asked at once; otherwise a ``transient`` or ``rate_limit`` failure is streamed again from the same
model after a delay. Each retry is shown to the client as a ``data-think-retry`` chunk (the
provider's own pre-output retries too), naming the model a fallback moved to."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..models.base import ModelRequest
from ..models.retry import RETRY_LISTENER, RetryNotice, is_retryable
from ..policy import RetryConfig, step_retry_delay
from ..tools import AnyTool
from ..types import ChatErrorContext, StepResult, StepRetry, StreamTransform
from .request import TurnFailed
from .step_stream import CallIds, StepStreamError, stream_step
from .ui_stream import AssistantMessageBuilder

if TYPE_CHECKING:
    from ..hooks.dispatch import HookDispatcher


class _Policies(Protocol):
    @property
    def retry(self) -> RetryConfig: ...

logger = logging.getLogger("think.turn")

__all__ = ["PlannedStep", "RetriedSteps", "StepPlanner", "model_label"]

#: A step as ``before_step`` planned it: the model, its request, and the tools it may call.
PlannedStep = tuple[Any, ModelRequest, dict[str, AnyTool]]
#: Plans a step again after a failed attempt (``before_step`` with ``ctx.retry``).
StepPlanner = Callable[[StepRetry], Awaitable[PlannedStep]]

#: Attempts of one step at most, whatever plugins keep switching between.
_MAX_ATTEMPTS = 16


def model_label(model: Any) -> str:
    """``provider:model_id`` — how a step's model is named in retries and records."""
    provider, model_id = getattr(model, "provider", None), getattr(model, "model_id", None)
    if model_id is None:
        return repr(model)
    return f"{provider}:{model_id}" if provider else str(model_id)


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
    stream_transforms: tuple[tuple[str, StreamTransform], ...]

    async def _stream_step_with_retry(
        self, step_number: int, planned: PlannedStep, replan: StepPlanner
    ) -> tuple[StepResult, dict[str, AnyTool]]:
        """Stream one step (the step and the tools it may call); a failure before any output fires
        ``before_step`` again with ``ctx.retry`` (``replan``): a step it moves to another model is
        asked of that model at once, otherwise a ``transient`` / ``rate_limit`` failure is
        retried on the same model."""
        policy = self.deps.retry
        observers = self.hooks.chunk_observers
        tries: dict[str, int] = {}  # failed attempts per model
        attempt = 0
        while True:
            model, request, tools = planned
            try:
                return await self._stream_step(step_number, model, request, observers), tools
            except StepStreamError as error:
                failure = await self._classified(error)
            label = model_label(model)
            tries[label] = tries.get(label, 0) + 1
            attempt += 1
            if failure.classification == "context_overflow" or attempt > _MAX_ATTEMPTS:
                raise failure from failure.error  # the runner compacts and runs the turn again
            retry = StepRetry(attempt=attempt, error=failure.error, classification=failure.classification, model=model)
            planned = await replan(retry)
            to = model_label(planned[0])
            if to == label and not self._retries_same_model(model, failure, tries[label] - 1):
                raise failure from failure.error
            self.builder.finish_step()  # an attempt follows (a failure that ends the turn is sent alone)
            if to != label:
                logger.info("step %d failed on %s (%s); retry %d on %s", step_number, label,
                            failure.classification, attempt, to)
                self._retry_notice(RetryNotice(attempt, 0.0, failure.error), classification=failure.classification,
                                   model=to)
                continue
            delay = step_retry_delay(failure.error, tries[label], policy)
            logger.info("step %d failed (%s); retry %d in %.2fs", step_number, failure.classification, attempt, delay)
            self._retry_notice(RetryNotice(attempt, delay, failure.error), classification=failure.classification)
            await asyncio.sleep(delay)

    async def _classified(self, error: StepStreamError) -> TurnFailed:
        """The step's failure, classified; one after output has streamed is never retried."""
        failure = TurnFailed(error.error, "stream", error.streamed)
        if failure.streamed:
            raise failure from error.error
        failure.classification = await self.hooks.classify_chat_error(
            failure.error,
            ChatErrorContext(
                session=self.session, request_id=self.request_id, stage="stream", messages_persisted=True, body=self.body
            ),
        )
        failure.classified = True
        return failure

    def _retries_same_model(self, model: Any, failure: TurnFailed, retried: int) -> bool:
        """Whether the step is asked of the same model again (it has been ``retried`` times)."""
        if failure.classification not in ("transient", "rate_limit") or retried >= self.deps.retry.max_retries:
            return False
        # A model that already retried this one itself would multiply the attempts.
        return not (getattr(model, "retries_before_output", False) and is_retryable(failure.error))

    async def _stream_step(self, step_number: int, model: Any, request: ModelRequest, observers: tuple[Any, ...]) -> StepResult:
        # The provider's own pre-output retries are shown like the step's.
        listening = RETRY_LISTENER.set(self._retry_notice)
        try:
            # In a task of its own: each network read of a live stream then wakes only the step's
            # own frames, not every frame of the turn that awaits it (a dozen, each resumed per
            # read). Awaiting a task cancels it with the turn; its context is the turn's, copied.
            return await asyncio.get_running_loop().create_task(stream_step(
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
                transforms=self.stream_transforms,
            ))
        finally:
            RETRY_LISTENER.reset(listening)

    def _retry_notice(self, notice: RetryNotice, *, classification: str | None = None, model: str | None = None) -> None:
        """A ``data-think-retry`` chunk: which retry waits how long, after which error (and,
        when ``before_step`` moved the step to another model, which one: ``model``)."""
        error, status = notice.error, getattr(notice.error, "status", None)
        data = {
            "attempt": notice.attempt, "delay": round(notice.delay, 3), "classification": classification,
            "status": status if isinstance(status, int) else None, "error": str(error) or type(error).__name__,
        }
        if model is not None:
            data["model"] = model
        self.builder.data("think-retry", data)

