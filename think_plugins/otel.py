"""Trace turns with OpenTelemetry, following the GenAI semantic conventions.

Registered under the entry point ``otel`` (install ``think-agent[otel]``). It uses the global tracer
provider, as instrumentation libraries do: until the application configures an SDK, spans are
no-ops costing a few dictionary operations per hook (there is no ``on_chunk``). Without
``opentelemetry-api`` it records nothing. A turn's spans::

    invoke_agent think            the turn, under the caller's current span
      chat <model>                one model call (ends when the step's first tool call starts)
      chat <model>                the same step retried (think.step.attempt = 2)
      execute_tool <name> ...     the step's tool calls, siblings however concurrent
      chat <model>                the next step

A sub-agent's turn (``agent.as_tool``) whose caller is traced by this plugin (the caller's
plugins are loaded into the sub-agent by default) is a child of the ``execute_tool`` span of the
call that runs it, and carries ``think.parent.session_id`` / ``request_id`` / ``tool_call_id``.

Every span below the turn gets its parent explicitly from the open spans of its turn, kept by
(session id, request id[, tool call id]), so concurrent tool calls and sessions never borrow
each other's context.

Retries are seen through ``classify_chat_error`` (observed ``tryfirst``, returning ``None``; a
classifier running before it hides them): the failed attempt ends in error with its exception
event, the next attempt starts at that moment (so it includes the backoff) and the turn span gets
a ``think.step.retry`` event. The hooks do not tell which classification led to a retry, so a
retried attempt's ``error.type`` is the exception's type; a failure that ends the turn carries
the classification when a classifier gave one. A turn re-run by context-overflow recovery keeps
its span (event ``think.turn.recovery``); an aborted turn ends with ``error.type`` ``aborted``.

Content (messages, system prompt, tool arguments and results) is recorded only with
``capture_content``, as JSON in the ``gen_ai.*.messages`` shapes, cut to ``max_content_chars``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from think_core import (
    PARENT_CALL_KEY,
    ChatErrorContext,
    ChatResponseResult,
    StepContext,
    StepResult,
    ToolCallContext,
    ToolCallResultContext,
    TurnContext,
    hookimpl,
    plugin_settings,
)
from think_plugins.otel_content import input_messages, output_message

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer, TracerProvider
except ImportError:  # the optional extra is not installed
    trace = None  # type: ignore[assignment]

__all__ = ["OTelSettings", "OTelTracing"]

logger = logging.getLogger("think.plugins.otel")

_MAX_OPEN_TURNS = 4096  # turns whose on_chat_response never came are ended beyond this
_OTHER = "_OTHER"  # the conventions' error.type when nothing more specific is known
_ERROR_NAME = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")  # "ValueError: ..." → ValueError

OPERATION = "gen_ai.operation.name"
CONVERSATION = "gen_ai.conversation.id"
ERROR_TYPE = "error.type"
STEP_NUMBER = "think.step.number"
STEP_ATTEMPT = "think.step.attempt"
_PARENT_IDS = ("session_id", "request_id", "tool_call_id")  # of a sub-agent's calling tool call


class OTelSettings(BaseModel):
    """Settings of ``otel``. Content is never recorded unless ``capture_content`` is set."""

    model_config = ConfigDict(extra="forbid")

    capture_content: bool = False
    """Record messages, the system prompt, tool arguments and tool results on the spans."""
    max_content_chars: int = Field(default=16_384, gt=0)
    """Each recorded content attribute is cut to this many characters."""
    agent_name: str = "think"
    """``gen_ai.agent.name``, and the turn span's name ``invoke_agent <agent_name>``."""


@dataclass
class _Step:
    """The open model call of a turn's current step."""

    number: int
    name: str
    attributes: dict[str, Any]
    span: Span
    attempt: int = 1
    model_done_ns: int | None = None  # when the model stream ended (the first tool hook)
    failure: tuple[int, BaseException] | None = None  # failed before output; fate not known yet


@dataclass
class _Turn:
    session_id: str
    span: Span
    context: Context  # the turn span as the explicit parent of its step and tool spans
    step: _Step | None = None
    tools: dict[str, Span] = field(default_factory=dict)
    error_type: str | None = None


class OTelTracing:
    """Emits the spans described in the module docstring.

    :param settings: :class:`OTelSettings` or a dict of its fields (settings given here win over
        ``Think(settings={"otel": ...})``).
    :param tracer_provider: the provider to use instead of the global one (tests pass an SDK
        provider with an in-memory exporter).
    """

    name = "otel"
    #: read by the plugin loader: ``Think(settings={name: {...}})`` is validated with it
    settings_model: type[OTelSettings] = OTelSettings

    def __init__(
        self,
        settings: OTelSettings | Mapping[str, Any] | None = None,
        *,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.settings = plugin_settings(OTelSettings, settings)
        self._turns: OrderedDict[tuple[str, str], _Turn] = OrderedDict()
        self._tracer: Tracer | None = None
        if trace is None:
            logger.info("otel: opentelemetry-api is not installed, nothing is traced (pip install 'think-agent[otel]')")
        else:
            self._tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)

    @property
    def open_turns(self) -> int:
        """Turns whose spans are still open (each is ended by its ``on_chat_response``)."""
        return len(self._turns)

    # -- hooks (each observes only and returns None: tracing never changes a turn) -----------
    @hookimpl(tryfirst=True)
    def before_turn(self, ctx: TurnContext) -> None:
        self._safely("before_turn", self._before_turn, ctx)

    @hookimpl(tryfirst=True)
    def before_step(self, ctx: StepContext) -> None:
        self._safely("before_step", self._before_step, ctx)

    @hookimpl(tryfirst=True)
    def classify_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> None:
        self._safely("classify_chat_error", self._classify_chat_error, error, ctx)

    @hookimpl(tryfirst=True)
    def before_tool_call(self, ctx: ToolCallContext) -> None:
        self._safely("before_tool_call", self._before_tool_call, ctx)

    @hookimpl
    def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        self._safely("after_tool_call", self._after_tool_call, ctx)

    @hookimpl
    def on_step_finish(self, ctx: StepResult) -> None:
        self._safely("on_step_finish", self._on_step_finish, ctx)

    @hookimpl(tryfirst=True)
    def on_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> None:
        self._safely("on_chat_error", self._on_chat_error, error, ctx)

    @hookimpl
    def on_chat_response(self, result: ChatResponseResult) -> None:
        self._safely("on_chat_response", self._on_chat_response, result)

    def _safely(self, hook: str, record: Callable[..., None], *args: Any) -> None:
        """A failure to record is logged, never raised: a raising decision hook would fail the turn."""
        if self._tracer is None:
            return
        try:
            record(*args)
        except Exception:
            logger.exception("otel: %s could not record its span", hook)

    # -- what each hook records ---------------------------------------------------------------
    def _before_turn(self, ctx: TurnContext) -> None:
        """Open the turn span, or note a re-run after context-overflow recovery (same span)."""
        turn = self._turns.get((str(ctx.session.id), ctx.request_id))
        if turn is not None:
            self._end_children(turn, "context_overflow")
            turn.span.add_event("think.turn.recovery", {ERROR_TYPE: "context_overflow"})
            return
        parent = (ctx.body or {}).get(PARENT_CALL_KEY)
        turn = self._open_turn(ctx.session, ctx.request_id, ctx.model, parent if isinstance(parent, dict) else None)
        turn.span.set_attribute("think.trigger", ctx.trigger)
        turn.span.set_attribute("think.continuation", ctx.continuation)
        if self._capturing(turn.span):
            turn.span.set_attribute("gen_ai.system_instructions", self._json([{"type": "text", "content": ctx.system}]))

    def _before_step(self, ctx: StepContext) -> None:
        turn = self._turn(ctx.session, ctx.request_id, ctx.model)
        if ctx.retry is not None and turn.step is not None and turn.step.number == ctx.step_number:
            # The same step asked again: its next attempt's span opens once that attempt shows
            # itself (see _retried), so a retry the engine then gives up adds none. Its model may
            # be another (a fallback): gen_ai.response.model says which answered.
            return
        self._end_step(turn, None)
        step = self._open_step(turn, ctx.step_number, ctx.model)
        if self._capturing(step.span):
            # Kept with the step's attributes: a retried attempt sends the same messages.
            step.attributes["gen_ai.input.messages"] = self._json(input_messages(ctx.messages))
            step.span.set_attribute("gen_ai.input.messages", step.attributes["gen_ai.input.messages"])

    def _classify_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> None:
        """A model call that failed in its stream: it may be retried, or end the turn."""
        turn = self._turns.get((str(ctx.session.id), ctx.request_id))
        if turn is None or turn.step is None or ctx.stage != "stream":
            return
        self._retried(turn)  # a second failure of one step: the first one was retried
        turn.step.failure = (time.time_ns(), error)

    def _before_tool_call(self, ctx: ToolCallContext) -> None:
        turn = self._turn(ctx.session, ctx.request_id)
        self._model_done(turn)
        self._open_tool(turn, ctx.tool_call_id, ctx.tool_name, ctx.step_number, ctx.tool, ctx.input)

    def _after_tool_call(self, ctx: ToolCallResultContext) -> None:
        turn = self._turn(ctx.session, ctx.request_id)
        self._model_done(turn)
        if ctx.tool_call_id not in turn.tools:  # before_tool_call did not run (invalid input, hidden)
            started = time.time_ns() - int(ctx.duration_ms * 1_000_000)
            self._open_tool(turn, ctx.tool_call_id, ctx.tool_name, ctx.step_number, ctx.tool, ctx.input, started)
        span = turn.tools.pop(ctx.tool_call_id)
        span.set_attribute("think.tool.decision", ctx.decision)
        if ctx.interrupted:  # started by a process that died; not run again
            span.set_attribute("think.tool.interrupted", True)
        if self._capturing(span):
            span.set_attribute("gen_ai.tool.call.result", self._json(ctx.output if ctx.success else ctx.error))
        if not ctx.success:
            match = _ERROR_NAME.match(ctx.error or "")
            _fail(span, match.group(1) if match else "tool_error", ctx.error)
        span.end()

    def _on_step_finish(self, ctx: StepResult) -> None:
        turn = self._turn(ctx.session, ctx.request_id)
        self._retried(turn)  # a failure still pending when its step finished was retried
        step = turn.step
        if step is None or step.number != ctx.step_number:  # before_step was hidden from us
            self._end_step(turn, None)
            step = self._open_step(turn, ctx.step_number, None)
        span, usage = step.span, ctx.usage
        span.set_attributes(
            {
                "gen_ai.response.finish_reasons": [ctx.finish_reason],
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
            }
        )
        optional = {
            "gen_ai.response.model": ctx.model_id,
            "gen_ai.response.id": ctx.response_id,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_input_tokens,
            "gen_ai.usage.reasoning.output_tokens": usage.reasoning_tokens,
        }
        span.set_attributes({key: value for key, value in optional.items() if value})
        if self._capturing(span):
            span.set_attribute("gen_ai.output.messages", self._json([output_message(ctx)]))
        turn.step = None
        span.end(end_time=step.model_done_ns)

    def _on_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> None:
        """The turn failed for good: its open spans end in error."""
        turn = self._turn(ctx.session, ctx.request_id)
        turn.error_type = ctx.classification or _qualified_name(error)
        turn.span.set_attribute("think.error.stage", ctx.stage)
        self._end_children(turn, turn.error_type)

    def _on_chat_response(self, result: ChatResponseResult) -> None:
        turn = self._turn(result.session, result.request_id)
        del self._turns[(str(result.session.id), result.request_id)]
        span, usage = turn.span, result.usage
        span.set_attributes(
            {
                "think.turn.status": result.status,
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
            }
        )
        if result.status != "completed":
            error_type = "aborted" if result.status == "aborted" else turn.error_type or _OTHER
            self._end_children(turn, error_type)
            _fail(span, error_type, result.error or result.status)
        elif self._capturing(span):
            message = {"role": "assistant", "parts": [{"type": "text", "content": result.message.text if result.message else ""}]}
            span.set_attribute("gen_ai.output.messages", self._json([message]))
        span.end()

    # -- spans --------------------------------------------------------------------------------
    def _turn(self, session: Any, request_id: str, model: Any = None) -> _Turn:
        """The open turn of this request; opened here when its before_turn was not seen."""
        turn = self._turns.get((str(session.id), request_id))
        return turn if turn is not None else self._open_turn(session, request_id, model)

    def _open_turn(self, session: Any, request_id: str, model: Any, parent: dict[str, Any] | None = None) -> _Turn:
        assert self._tracer is not None
        agent = self.settings.agent_name
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent",
            "gen_ai.agent.name": agent,
            CONVERSATION: str(session.id),
            "think.request_id": request_id,
            **_model_attributes(model),
        }
        # The parent is the caller's current span: a turn nests under the application's work; a
        # sub-agent's turn nests under the span of the tool call that runs it (when traced here).
        parent_context = None
        if parent is not None:
            attributes.update({f"think.parent.{key}": str(parent[key]) for key in _PARENT_IDS if key in parent})
            caller = self._turns.get((str(parent.get("session_id")), str(parent.get("request_id"))))
            call_span = caller.tools.get(str(parent.get("tool_call_id"))) if caller is not None else None
            if call_span is not None:
                parent_context = trace.set_span_in_context(call_span)
        span = self._tracer.start_span(
            f"invoke_agent {agent}", context=parent_context, kind=SpanKind.INTERNAL, attributes=attributes
        )
        turn = _Turn(str(session.id), span, trace.set_span_in_context(span))
        self._turns[(str(session.id), request_id)] = turn
        while len(self._turns) > _MAX_OPEN_TURNS:
            _, stale = self._turns.popitem(last=False)
            self._end_children(stale, _OTHER)
            _fail(stale.span, _OTHER, "the turn never reported its end")
            stale.span.end()
        return turn

    def _open_step(self, turn: _Turn, number: int, model: Any) -> _Step:
        assert self._tracer is not None
        model_attributes = _model_attributes(model)
        attributes = {OPERATION: "chat", CONVERSATION: turn.session_id, STEP_NUMBER: number, **model_attributes}
        name = f"chat {model_attributes.get('gen_ai.request.model', '')}".strip()
        span = self._tracer.start_span(name, context=turn.context, kind=SpanKind.CLIENT, attributes=attributes)
        turn.step = _Step(number, name, attributes, span)
        return turn.step

    def _open_tool(
        self, turn: _Turn, call_id: str, tool_name: str, step_number: int, tool: Any, arguments: Any,
        start_time: int | None = None,
    ) -> Span:
        assert self._tracer is not None
        if call_id in turn.tools:
            return turn.tools[call_id]
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            "gen_ai.tool.name": tool_name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            CONVERSATION: turn.session_id,
            STEP_NUMBER: step_number,
        }
        description = getattr(tool, "description", None)
        if description:
            attributes["gen_ai.tool.description"] = description
        span = self._tracer.start_span(
            f"execute_tool {tool_name}", context=turn.context, kind=SpanKind.INTERNAL,
            attributes=attributes, start_time=start_time,
        )
        if self._capturing(span):
            span.set_attribute("gen_ai.tool.call.arguments", self._json(arguments))
        turn.tools[call_id] = span
        return span

    def _model_done(self, turn: _Turn) -> None:
        """A tool hook fired: the step's model call has ended (and a pending failure was retried)."""
        self._retried(turn)
        if turn.step is not None and turn.step.model_done_ns is None:
            turn.step.model_done_ns = time.time_ns()

    def _retried(self, turn: _Turn) -> None:
        """The step goes on after a failed model call: end that attempt, open the next one."""
        step = turn.step
        if step is None or step.failure is None:
            return
        assert self._tracer is not None
        failed_at, error = step.failure
        error_type = _qualified_name(error)
        _end_failed(step.span, error_type, error, failed_at)
        step.attempt += 1
        turn.span.add_event(
            "think.step.retry",
            {STEP_NUMBER: step.number, STEP_ATTEMPT: step.attempt, ERROR_TYPE: error_type},
            timestamp=failed_at,
        )
        step.span = self._tracer.start_span(
            step.name, context=turn.context, kind=SpanKind.CLIENT,
            attributes={**step.attributes, STEP_ATTEMPT: step.attempt}, start_time=failed_at,
        )
        step.failure = None

    def _end_step(self, turn: _Turn, error_type: str | None) -> None:
        step, turn.step = turn.step, None
        if step is None:
            return
        if step.failure is not None:
            failed_at, error = step.failure
            _end_failed(step.span, error_type or _qualified_name(error), error, failed_at)
        elif error_type is not None and step.model_done_ns is None:  # cut off during the model call
            _fail(step.span, error_type, None)
            step.span.end()
        else:  # the model call had ended; what failed after it (a tool call) carries the error
            step.span.end(end_time=step.model_done_ns)

    def _end_children(self, turn: _Turn, error_type: str) -> None:
        """End the turn's open step and tool spans in error (a span must always end)."""
        self._end_step(turn, error_type)
        tools, turn.tools = turn.tools, {}
        for span in tools.values():
            _fail(span, error_type, None)
            span.end()

    # -- helpers ------------------------------------------------------------------------------
    def _capturing(self, span: Span) -> bool:
        return self.settings.capture_content and span.is_recording()

    def _json(self, value: Any) -> str:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(value)
        return text[: self.settings.max_content_chars]


def _qualified_name(error: BaseException) -> str:
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _fail(span: Span, error_type: str, description: str | None) -> None:
    span.set_attribute(ERROR_TYPE, error_type)
    span.set_status(StatusCode.ERROR, description)


def _end_failed(span: Span, error_type: str, error: BaseException, at: int) -> None:
    """End a model call that failed at ``at`` (ns), with the exception as its event."""
    span.record_exception(error, timestamp=at)
    _fail(span, error_type, f"{type(error).__name__}: {error}")
    span.end(end_time=at)


def _model_attributes(model: Any) -> dict[str, Any]:
    attributes = {
        "gen_ai.request.model": getattr(model, "model_id", None),
        "gen_ai.provider.name": getattr(model, "provider", None),
    }
    return {key: value for key, value in attributes.items() if isinstance(value, str) and value}
