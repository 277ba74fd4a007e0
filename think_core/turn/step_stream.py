"""Streaming one model step: every provider event goes to the assistant message builder (and
so to the UI stream) and to the ``on_chunk`` observers; the step's text, reasoning and tool
calls are collected into its :class:`~think_core.types.StepResult`.

This is the per-token hot path: one branch per event kind, no allocation beyond what the
events themselves carry, and ``on_chunk`` contexts are built only when someone observes them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from contextlib import aclosing
from typing import Any

from ..events import Finish, ToolCall, ToolInputDelta, ToolInputStart, Usage
from ..models.base import ModelRequest, ReasoningBlock, ToolCallRequest
from ..models.exchange import EXCHANGE, StepExchange
from ..types import ChunkContext, StepResult
from .ui_stream import AssistantMessageBuilder

__all__ = ["CallIds", "StepStreamError", "stream_step"]


async def _batches(model: Any, request: ModelRequest) -> AsyncGenerator[Sequence[Any], None]:
    """The step's events a list at a time: as the model reads them (``stream_batches``, the
    HTTP providers), else one by one (``stream``, any model)."""
    batched = getattr(model, "stream_batches", None)
    if batched is not None:
        async with aclosing(batched(request)) as batches:
            async for batch in batches:
                yield batch
        return
    async with aclosing(model.stream(request)) as events:
        async for event in events:
            yield (event,)


class StepStreamError(Exception):
    """The model stream of a step failed; ``streamed`` tells whether it had produced output."""

    def __init__(self, error: BaseException, streamed: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.streamed = streamed


async def stream_step(
    model: Any,
    request: ModelRequest,
    *,
    step_number: int,
    session: Any,
    request_id: str,
    builder: AssistantMessageBuilder,
    call_ids: CallIds,
    invalid_inputs: dict[str, str],
    emit_chunk: Callable[[ChunkContext], None],
    observers: tuple[Any, ...],
    body: dict[str, Any] | None = None,
) -> StepResult:
    """Stream ``request`` to ``model`` and return the finished step (tools not yet run).
    Raises :class:`StepStreamError` when the stream fails."""
    builder.start_step()
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCallRequest] = []
    finish = None
    streamed = False
    exchange = StepExchange()
    exchanging = EXCHANGE.set(exchange)
    try:
        async with aclosing(_batches(model, request)) as batches:
            async for batch in batches:
                for event in batch:
                    kind = event.type
                    if kind == "text-delta":
                        streamed = True
                        text.append(event.text)
                        builder.text_delta(event.text)
                    elif kind == "reasoning-delta":
                        streamed = True
                        reasoning.append(event.text)
                        builder.reasoning_delta(event.text, event.provider_metadata)
                    elif kind == "tool-input-start":
                        streamed = True
                        event = call_ids.started(event)
                        builder.tool_input_start(event.tool_call_id, event.tool_name)
                    elif kind == "tool-input-delta":
                        event = call_ids.delta(event)
                        builder.tool_input_delta(event.tool_call_id, event.delta)
                    elif kind == "tool-call":
                        streamed = True
                        event = call_ids.completed(event)
                        calls.append(_call_completed(event, builder, invalid_inputs))
                    elif kind == "finish":
                        finish = event
                        continue
                    elif kind == "error":
                        raise event.error
                    else:
                        continue
                    if observers:
                        emit_chunk(ChunkContext(session, request_id, step_number, event, body))
    except Exception as exc:  # not a cancellation (a BaseException): that propagates as it is
        builder.drop_unfinished_tool_inputs()
        raise StepStreamError(exc, streamed) from exc
    finally:
        EXCHANGE.reset(exchanging)
    builder.drop_unfinished_tool_inputs()
    return StepResult(
        session=session,
        request_id=request_id,
        step_number=step_number,
        body=body,
        text="".join(text),
        reasoning_text="".join(reasoning),
        reasoning_blocks=_reasoning_blocks(builder, reasoning),
        tool_calls=calls,
        **_finish_fields(finish, getattr(model, "model_id", None), exchange),
    )


def _reasoning_blocks(builder: AssistantMessageBuilder, reasoning: list[str]) -> list[ReasoningBlock]:
    """The step's reasoning blocks (what a provider needs back with them), if it reasoned."""
    if not reasoning:
        return []
    return [ReasoningBlock(text=t, provider_metadata=m) for t, m in builder.step_reasoning()]


def _call_completed(event: ToolCall, builder: AssistantMessageBuilder, invalid_inputs: dict[str, str]) -> ToolCallRequest:
    """A tool call whose input is complete: its part in the answer, and the call to run."""
    raw_input = event.input if event.input is not None else event.raw_input
    builder.tool_input_available(event.tool_call_id, event.tool_name, raw_input, event.provider_metadata)
    if event.input is None:
        # The arguments were not a JSON object: the call is answered with an error result.
        invalid_inputs[event.tool_call_id] = event.raw_input
    return ToolCallRequest.model_construct(
        id=event.tool_call_id,
        name=event.tool_name,
        input=event.input if event.input is not None else {},
        provider_metadata=event.provider_metadata,
    )


def _finish_fields(finish: Finish | None, default_model_id: str | None, exchange: StepExchange) -> dict[str, Any]:
    """What a step's ``finish`` event (if one came) and its HTTP exchange tell of it."""
    model_id = finish.model_id if finish and finish.model_id else default_model_id
    response_id = finish.response_id if finish else None
    return {
        "finish_reason": finish.finish_reason if finish else "other",
        "usage": finish.usage if finish else Usage(),
        "model_id": model_id,
        "response_id": response_id,
        "provider_metadata": finish.provider_metadata if finish else None,
        "request": exchange.request,
        "response": {"id": response_id, "model": model_id, "headers": exchange.headers},
        "warnings": exchange.warnings,
    }


class CallIds:
    """Keeps tool-call ids unique within a turn.

    Some OpenAI-compatible servers number calls per response (``call_0`` in every step), and a
    model may even repeat an id within one step. A repeated id would overwrite the earlier
    call's part and pair results with the wrong call, so repeats get a suffix (``call_0_2``:
    letters, digits and ``_`` only, which every provider accepts in an id).
    The n-th start of an id pairs with its n-th completion, in stream order.
    """

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._open: dict[str, list[str]] = {}

    def _fresh(self, raw: str) -> str:
        candidate, n = raw, 1
        while candidate in self._used:
            n += 1
            candidate = f"{raw}_{n}"
        self._used.add(candidate)
        return candidate

    def reserve(self, ids: Iterable[str]) -> None:
        """Ids the turn already used (steps replayed from its journal)."""
        self._used.update(ids)

    def started(self, event: ToolInputStart) -> ToolInputStart:
        assigned = self._fresh(event.tool_call_id)
        self._open.setdefault(event.tool_call_id, []).append(assigned)
        return event if assigned == event.tool_call_id else ToolInputStart(assigned, event.tool_name)

    def delta(self, event: ToolInputDelta) -> ToolInputDelta:
        pending = self._open.get(event.tool_call_id)
        if not pending or pending[-1] == event.tool_call_id:
            return event
        return ToolInputDelta(pending[-1], event.delta)

    def completed(self, event: ToolCall) -> ToolCall:
        pending = self._open.get(event.tool_call_id)
        assigned = pending.pop(0) if pending else self._fresh(event.tool_call_id)
        if assigned == event.tool_call_id:
            return event
        return ToolCall(assigned, event.tool_name, event.input, event.raw_input, event.provider_metadata)
