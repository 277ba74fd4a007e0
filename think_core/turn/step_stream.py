"""Streaming one model step: every provider event goes to the assistant message builder (and
so to the UI stream) and to the ``on_chunk`` observers; the step's text, reasoning, tool
calls, sources and files are collected into its :class:`~think_core.types.StepResult`.

This is the per-token hot path: one branch per event kind, no allocation beyond what the
events themselves carry, and ``on_chunk`` contexts are built only when someone observes them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import Any

from ..errors import PluginError
from ..events import DocumentSource, Finish, GeneratedFile, ToolCall, ToolInputDelta, ToolInputStart, UrlSource, Usage
from ..models.base import ModelRequest, ReasoningBlock, ToolCallRequest
from ..models.exchange import EXCHANGE, StepExchange
from ..types import ChunkContext, StepResult, StreamTransform
from .ui_stream import AssistantMessageBuilder

__all__ = ["CallIds", "StepStreamError", "stream_step"]


def _batches(model: Any, request: ModelRequest) -> AsyncIterator[Sequence[Any]]:
    """The step's events a list at a time: as the model reads them (``stream_batches``, the
    HTTP providers: their own iterator, no layer of ours per read), else one by one
    (``stream``, any model)."""
    batched = getattr(model, "stream_batches", None)
    if batched is not None:
        batches: AsyncIterator[Sequence[Any]] = batched(request)
        return batches
    return _singly(model, request)


async def _singly(model: Any, request: ModelRequest) -> AsyncGenerator[Sequence[Any], None]:
    async with aclosing(model.stream(request)) as events:
        async for event in events:
            yield (event,)


async def _transformed_batches(
    model: Any, request: ModelRequest, transforms: tuple[tuple[str, StreamTransform], ...]
) -> AsyncGenerator[Sequence[Any], None]:
    """The step's events through the plugins' stream transforms, chained in hook order, one at
    a time (a transform sees and yields single events)."""
    events: AsyncIterator[Any] = _events(model, request)
    for plugin, transform in transforms:
        events = _StreamStage(plugin, transform, events)
    try:
        async for event in events:
            yield (event,)
    finally:
        await _close(events)


async def _events(model: Any, request: ModelRequest) -> AsyncGenerator[Any, None]:
    async with _closing(_batches(model, request)) as batches:
        async for batch in batches:
            for event in batch:
                yield event


class _StreamStage:
    """One plugin's transform over the events before it. A failure inside the transform is a
    :class:`PluginError` naming the plugin (the turn fails closed); an error the events before
    it raised (the model's) passes through as it is, even though it surfaced through the
    transform's iterator."""

    def __init__(self, plugin: str, transform: StreamTransform, source: AsyncIterator[Any]) -> None:
        self.plugin = plugin
        self.source = source
        self.upstream_error: BaseException | None = None
        self.watched = self._watched()
        try:
            self.output = transform(self.watched)
            self.output.__anext__  # noqa: B018 - an object that is no async iterator fails here, named
        except Exception as exc:
            raise PluginError(plugin, "transform_stream", exc) from exc

    async def _watched(self) -> AsyncGenerator[Any, None]:
        try:
            async for event in self.source:
                yield event
        except Exception as exc:
            self.upstream_error = exc
            raise

    def __aiter__(self) -> _StreamStage:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.output.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as exc:
            if exc is self.upstream_error or isinstance(exc, PluginError):
                raise
            raise PluginError(self.plugin, "transform_stream", exc) from exc

    async def aclose(self) -> None:
        await _close(self.output)
        await self.watched.aclose()
        await _close(self.source)


async def _close(iterator: object) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


@asynccontextmanager
async def _closing(source: AsyncIterator[Sequence[Any]]) -> AsyncGenerator[AsyncIterator[Sequence[Any]], None]:
    """``aclosing`` for any async iterator: closed (``aclose``, where it has one) however the
    step ends, so the HTTP response behind it is released."""
    try:
        yield source
    finally:
        close = getattr(source, "aclose", None)
        if close is not None:
            await close()


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
    transforms: tuple[tuple[str, StreamTransform], ...] = (),
) -> StepResult:
    """Stream ``request`` to ``model`` and return the finished step (tools not yet run).
    Raises :class:`StepStreamError` when the stream fails."""
    builder.start_step()
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCallRequest] = []
    content = StepContent()
    finish = None
    streamed = False
    exchange = StepExchange()
    exchanging = EXCHANGE.set(exchange)
    try:
        source = _transformed_batches(model, request, transforms) if transforms else _batches(model, request)
        async with _closing(source) as batches:
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
                    elif kind == "source" or kind == "file":
                        streamed = True
                        content.add(event, builder)
                    else:
                        finish = _finish_so_far(event, finish)
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
        sources=content.sources,
        files=content.files,
        **_finish_fields(finish, getattr(model, "model_id", None), exchange),
    )


def _finish_so_far(event: Any, finish: Finish | None) -> Finish | None:
    """The step's ``finish`` once ``event`` (neither content nor a tool call) is seen: ``event``
    itself if it is the finish; an error event raises its error; any other kind changes nothing."""
    if event.type == "error":
        raise event.error
    return event if event.type == "finish" else finish


class StepContent:
    """A step's sources and generated files. A source is listed (and becomes a part of the
    answer) once, where it is first cited: a model cites the same page sentence after sentence."""

    __slots__ = ("sources", "files", "_cited")

    def __init__(self) -> None:
        self.sources: list[UrlSource | DocumentSource] = []
        self.files: list[GeneratedFile] = []
        self._cited: set[tuple[str | None, ...]] = set()

    def add(self, event: UrlSource | DocumentSource | GeneratedFile, builder: AssistantMessageBuilder) -> None:
        if isinstance(event, GeneratedFile):
            self.files.append(event)
            builder.file(event)
            return
        key = (event.url,) if isinstance(event, UrlSource) else (event.media_type, event.title, event.filename)
        if key not in self._cited:
            self._cited.add(key)
            self.sources.append(event)
            builder.source(event)


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
