"""One turn: the model loop of DESIGN §5 with every hook at its place.

A :class:`Turn` is created by an entry path of :class:`~think_core.session.Session` while it
holds the session's turn lock. ``run()`` drives the steps and returns the outcome; the session
persists, releases the lock and fires ``on_chat_response``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from pydantic import BaseModel, ValidationError

from .compaction import compact_session
from .events import ToolCall, ToolInputDelta, ToolInputStart, Usage
from .messages import is_tool_part, to_model_messages, tool_name_of
from .models.base import (
    AssistantMessage,
    CallSettings,
    ModelMessage,
    ModelRequest,
    OutputSpec,
    ToolCallRequest,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from .models.retry import is_retryable, parse_retry_after
from .tool_calls import ToolCallRunner
from .tools import Tool, client_tools_from
from .types import (
    ChatErrorContext,
    ChunkContext,
    StepContext,
    StepResult,
    TurnConfig,
    TurnContext,
    UIMessage,
)
from .ui_stream import AssistantMessageBuilder

if TYPE_CHECKING:
    from .session import Session

logger = logging.getLogger("think.turn")


class TurnFailed(Exception):
    """Internal: a turn error with the stage it happened at."""

    def __init__(self, error: BaseException, stage: str, streamed: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        self.stage = stage
        self.streamed = streamed  # whether the failed step had produced output
        self.classification: Optional[str] = None
        self.classified = False  # classify_chat_error was consulted (its answer may be None)


@dataclass
class TurnOutcome:
    status: str  # completed | error | aborted
    error_text: Optional[str] = None
    output: Any = None
    usage: Usage = field(default_factory=Usage)


class Turn:
    """Runs the steps of one turn. Created and driven by the session under its turn lock."""

    def __init__(
        self,
        session: "Session",
        *,
        request_id: str,
        trigger: str,
        continuation: bool,
        body: Optional[dict[str, Any]],
        builder: AssistantMessageBuilder,
        history: list[ModelMessage],
    ) -> None:
        self.session = session
        self.agent = session.agent
        self.hooks = session.agent.hooks
        self.request_id = request_id
        self.trigger = trigger
        self.continuation = continuation
        self.body = body
        self.builder = builder
        self.history = history
        self.steps: list[StepResult] = []
        self.usage = Usage()
        self.step_messages: list[ModelMessage] = []
        self.output_type: Any = None
        self.invalid_inputs: dict[str, str] = {}
        self.call_ids = CallIds()
        self.base_messages: list[ModelMessage] = []
        self.messages_from_hook = False
        self.proactive_attempts = 0
        self.tool_runner = ToolCallRunner(
            session, request_id, self.hooks, builder, invalid_inputs=self.invalid_inputs, body=body
        )

    # ------------------------------------------------------------------------------------
    def base_tools(self) -> dict[str, Tool]:
        """The agent's tools plus the client tools the request body declares."""
        tools: dict[str, Tool] = dict(self.agent.tools)
        if self.body:
            for name, client_tool in client_tools_from(self.body.get("clientTools")).items():
                tools.setdefault(name, client_tool)
        return tools

    async def run_approved_calls(self, message: UIMessage) -> Optional[UIMessage]:
        """Run the calls of ``message`` that a human approved (state ``approval-responded``)
        and write their results back into it. Returns the updated message, or ``None``."""
        approved = [
            ToolCallRequest(id=p["toolCallId"], name=tool_name_of(p), input=p.get("input") or {})
            for p in message.parts
            if is_tool_part(p) and p.get("state") == "approval-responded"
        ]
        if not approved:
            return None
        builder = AssistantMessageBuilder.resume(message, self.builder._emit)
        runner = ToolCallRunner(
            self.session, self.request_id, self.hooks, builder, approved=frozenset(c.id for c in approved), body=self.body
        )
        await runner.run_all(0, approved, self.base_tools(), list(self.history))
        return builder.message(message.metadata)

    async def run(self) -> TurnOutcome:
        agent = self.agent
        tools = self.base_tools()
        ctx = TurnContext(
            session=self.session,
            request_id=self.request_id,
            trigger=self.trigger,
            system=agent.system,
            messages=list(self.history),
            tools=dict(tools),
            model=agent.model,
            continuation=self.continuation,
            body=self.body,
        )
        try:
            config = await self.hooks.before_turn(ctx) or TurnConfig()
        except Exception as exc:
            raise TurnFailed(exc, "turn") from exc

        try:
            model = agent.resolve_model(config.model) if config.model is not None else agent.model
            extra_tools = _checked_tools(config.tools)
        except Exception as exc:  # a bad TurnConfig fails the turn, like a raising hook
            raise TurnFailed(exc, "turn") from exc
        if model is None:
            raise TurnFailed(RuntimeError("no model configured: pass Think(model=...)"), "turn")
        system = config.system if config.system is not None else ctx.system
        self.messages_from_hook = config.messages is not None
        self.base_messages = _with_continue_checkpoint(
            list(config.messages) if config.messages is not None else ctx.messages
        )
        tools.update(extra_tools)
        active_tools = config.active_tools
        tool_choice = config.tool_choice
        max_steps = config.max_steps if config.max_steps is not None else agent.max_steps
        if config.send_reasoning is not None:
            self.builder.send_reasoning = config.send_reasoning
        output_spec = self._output_spec(config.output)
        settings = config.call_settings(CallSettings())

        chunk_observers = self.hooks.chunk_observers
        for step_number in range(max_steps):
            await self._proactive_guard()
            step_model, step_system, step_messages = model, system, self.base_messages + self.step_messages
            step_active, step_choice = active_tools, tool_choice
            step_ctx = StepContext(
                session=self.session,
                request_id=self.request_id,
                step_number=step_number,
                steps=list(self.steps),
                model=model,
                messages=step_messages,
            )
            try:
                step_config = await self.hooks.before_step(step_ctx)
            except Exception as exc:
                raise TurnFailed(exc, "turn") from exc
            if step_config is not None:
                if step_config.model is not None:
                    try:
                        step_model = agent.resolve_model(step_config.model)
                    except Exception as exc:
                        raise TurnFailed(exc, "turn") from exc
                if step_config.system is not None:
                    step_system = step_config.system
                if step_config.messages is not None:
                    step_messages = list(step_config.messages)
                if step_config.active_tools is not None:
                    step_active = step_config.active_tools
                if step_config.tool_choice is not None:
                    step_choice = step_config.tool_choice
            step_tools = {n: t for n, t in tools.items() if step_active is None or n in step_active}
            request = ModelRequest(
                system=step_system,
                messages=step_messages,
                tools=[ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in step_tools.values()],
                tool_choice=step_choice,
                output=output_spec,
                settings=settings,
            )
            step = await self._stream_step(step_number, step_model, request, chunk_observers)
            calls = step.tool_calls
            outcomes = await self.tool_runner.run_all(step_number, calls, step_tools, step_messages) if calls else []
            step.tool_results = [
                {"tool_call_id": o.call.id, "tool_name": o.call.name, "output": o.output, "error": o.error}
                for o in outcomes
                if not o.pending
            ]
            self.builder.finish_step()
            self.steps.append(step)
            self.usage = self.usage + step.usage
            settled = [o for o in outcomes if not o.pending]
            self.step_messages.append(
                AssistantMessage(
                    text=step.text,
                    reasoning=step.reasoning_text,
                    tool_calls=[o.call for o in settled],
                )
            )
            self.step_messages.extend(
                ToolMessage(
                    tool_call_id=o.call.id,
                    tool_name=o.call.name,
                    output=o.error if o.error is not None else o.output,
                    is_error=o.error is not None,
                )
                for o in settled
            )
            self.session.last_input_tokens = step.usage.input_tokens or step.usage.total_tokens
            await self.hooks.on_step_finish(step)
            if any(o.pending for o in outcomes):
                # A client tool or an approval is pending: the turn ends; an answer continues it.
                return TurnOutcome("completed", usage=self.usage)
            if not calls:
                break

        output = self._parse_output(config.output)
        return TurnOutcome("completed", usage=self.usage, output=output)

    # ------------------------------------------------------------------------------------
    async def _proactive_guard(self) -> None:
        """Compact before a step once the last known input size passes the threshold (DESIGN §8)."""
        proactive = self.agent.context_overflow.proactive
        if proactive is None or self.proactive_attempts >= proactive.max_compactions:
            return
        if self.session.last_input_tokens < proactive.threshold:
            return
        self.proactive_attempts += 1
        try:
            result = await compact_session(self.session, reason="proactive")
        except Exception:
            logger.warning("proactive compaction failed; the step proceeds uncompacted", exc_info=True)
            return
        if result is None or not result.shortened:
            return
        self.builder.data("think-compaction", _compaction_data(result))
        self.session.last_input_tokens = 0
        if not self.messages_from_hook:
            self.base_messages = _with_continue_checkpoint(
                to_model_messages(await self.agent.db.history(self.session.id))
            )

    async def _stream_step(self, step_number: int, model: Any, request: ModelRequest, observers: tuple) -> StepResult:
        """Stream one step; a ``transient`` / ``rate_limit`` failure before any output is retried."""
        policy = self.agent.retry
        transport_retries = getattr(model, "retries_before_output", False)
        attempt = 0
        while True:
            try:
                return await self._stream_step_once(step_number, model, request, observers)
            except TurnFailed as failure:
                if failure.streamed:
                    raise
                failure.classification = await self.hooks.classify_chat_error(
                    failure.error,
                    ChatErrorContext(
                        session=self.session, request_id=self.request_id, stage="stream", messages_persisted=True
                    ),
                )
                failure.classified = True
                if failure.classification not in ("transient", "rate_limit") or attempt >= policy.max_retries:
                    raise
                if transport_retries and is_retryable(failure.error):
                    raise  # the provider already retried this one; retrying again multiplies attempts
                attempt += 1
                delay = retry_delay(failure.error, attempt, policy)
                logger.info("step %d failed (%s); retry %d in %.2fs", step_number, failure.classification, attempt, delay)
                self.builder.finish_step()
                self.builder.data("think-retry", {"attempt": attempt, "classification": failure.classification, "delay": delay})
                await asyncio.sleep(delay)

    async def _stream_step_once(self, step_number: int, model: Any, request: ModelRequest, observers: tuple) -> StepResult:
        builder = self.builder
        builder.start_step()
        emit_chunk = self.hooks.emit_chunk
        session, request_id = self.session, self.request_id
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCallRequest] = []
        finish = None
        streamed = False
        try:
            async with aclosing(model.stream(request)) as events:
                async for event in events:
                    kind = event.type
                    if kind == "text-delta":
                        streamed = True
                        text.append(event.text)
                        builder.text_delta(event.text)
                    elif kind == "reasoning-delta":
                        streamed = True
                        reasoning.append(event.text)
                        builder.reasoning_delta(event.text)
                    elif kind == "tool-input-start":
                        streamed = True
                        event = self.call_ids.started(event)
                        builder.tool_input_start(event.tool_call_id, event.tool_name)
                    elif kind == "tool-input-delta":
                        event = self.call_ids.delta(event)
                        builder.tool_input_delta(event.tool_call_id, event.delta)
                    elif kind == "tool-call":
                        streamed = True
                        event = self.call_ids.completed(event)
                        raw_input = event.input if event.input is not None else event.raw_input
                        builder.tool_input_available(event.tool_call_id, event.tool_name, raw_input)
                        calls.append(
                            ToolCallRequest.model_construct(
                                id=event.tool_call_id, name=event.tool_name, input=event.input if event.input is not None else {}
                            )
                        )
                        if event.input is None:
                            # The arguments were not a JSON object: the call is answered with an error result.
                            self.invalid_inputs[event.tool_call_id] = event.raw_input
                    elif kind == "finish":
                        finish = event
                        continue
                    elif kind == "error":
                        raise event.error
                    else:
                        continue
                    if observers:
                        emit_chunk(ChunkContext(session, request_id, step_number, event))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            builder.drop_unfinished_tool_inputs()
            raise TurnFailed(exc, "stream", streamed) from exc
        builder.drop_unfinished_tool_inputs()
        return StepResult(
            session=session,
            request_id=request_id,
            step_number=step_number,
            finish_reason=finish.finish_reason if finish else "other",
            text="".join(text),
            reasoning_text="".join(reasoning),
            tool_calls=calls,
            usage=finish.usage if finish else Usage(),
            model_id=(finish.model_id if finish and finish.model_id else getattr(model, "model_id", None)),
            response_id=finish.response_id if finish else None,
            provider_metadata=finish.provider_metadata if finish else None,
        )

    # ------------------------------------------------------------------------------------
    def _output_spec(self, output: Any) -> Optional[OutputSpec]:
        if output is None:
            return None
        if isinstance(output, type) and issubclass(output, BaseModel):
            self.output_type = output
            return OutputSpec(name=output.__name__, json_schema=output.model_json_schema())
        if isinstance(output, dict):
            return OutputSpec(name=output.get("title", "output"), json_schema=output)
        raise TurnFailed(TypeError("TurnConfig.output must be a pydantic model class or a JSON schema dict"), "turn")

    def _parse_output(self, output: Any) -> Any:
        if output is None:
            return None
        text = self.steps[-1].text if self.steps else ""
        try:
            if self.output_type is not None:
                return self.output_type.model_validate_json(_strip_fences(text))
            return json.loads(_strip_fences(text))
        except (ValidationError, ValueError) as exc:
            raise TurnFailed(ValueError(f"structured output did not validate: {exc}"), "stream") from exc


_CONTINUE_CHECKPOINT = "Continue your previous response from exactly where it left off. Do not repeat any of it."


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
        return ToolCall(assigned, event.tool_name, event.input, event.raw_input)


def _checked_tools(extra: Optional[list[Any]]) -> dict[str, Tool]:
    tools: dict[str, Tool] = {}
    for item in extra or ():
        if not isinstance(item, Tool):
            raise TypeError(f"TurnConfig.tools must hold Tool objects (use @tool), got {item!r}")
        tools[item.name] = item
    return tools


def _with_continue_checkpoint(messages: list[ModelMessage]) -> list[ModelMessage]:
    """A request must not end with the assistant's message (providers reject prefill): ask the
    model to continue instead. The checkpoint is never persisted."""
    if messages and messages[-1].role == "assistant":
        return [*messages, UserMessage(content=_CONTINUE_CHECKPOINT)]
    return messages


def retry_delay(error: BaseException, attempt: int, policy: Any) -> float:
    """Honour the provider's ``retry-after`` when it sent one, else exponential backoff with jitter."""
    headers = getattr(error, "headers", None)
    if headers:
        advised = parse_retry_after(headers)
        if advised is not None:
            return min(advised, policy.max_delay)
    backoff = policy.base_delay * (2 ** (attempt - 1))
    return min(backoff * (0.75 + random.random() / 2), policy.max_delay)


def _compaction_data(result: Any) -> dict[str, Any]:
    return {
        "reason": result.reason,
        "messages": result.compacted_messages,
        "tokensBefore": result.tokens_before,
        "tokensAfter": result.tokens_after,
    }


def _strip_fences(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        if stripped.rstrip().endswith("```"):
            stripped = stripped.rstrip()[:-3]
    return stripped.strip()
