"""One turn: the model loop with every hook at its place.

A turn locks nothing and persists nothing itself: the runner (``runner.py``) holds the
session's turn lock, persists the input and the answer, and fires ``on_chat_response``. A
:class:`Turn` gets everything it uses in one :class:`TurnDeps` and never reaches back into the
agent or the session.

The order of a turn: ``before_turn`` (apply its ``TurnConfig``), then for each step the
proactive overflow guard, ``before_step`` (apply its ``StepConfig``), the streamed model step
with ``on_chunk`` per event, the step's tool calls, ``on_step_finish``; the loop stops when a
step calls no tool, ``max_steps`` is reached, or a client tool / approval is pending.

A durable turn (its journal a :class:`~think_core.turn.journal.TurnJournal`) journals each step's
model output before its tools run and each finished step before ``on_step_finish``; resumed
after a crash, it replays the finished steps and carries on with the interrupted one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..events import Usage
from ..messages import to_model_messages
from ..models.base import (
    AssistantMessage,
    CallSettings,
    ModelMessage,
    ModelRequest,
    OutputSpec,
    ToolMessage,
    ToolSpec,
)
from ..policy import ContextOverflowConfig, RetryConfig
from ..tools import AnyTool, client_tools_from
from ..types import (
    StepConfig,
    StepContext,
    StepResult,
    StepRetry,
    StepToolResult,
    StreamTransform,
    Trigger,
    TurnConfig,
    TurnContext,
    UIMessage,
)
from .approvals import run_approved_calls
from .compaction import CompactionResult, Compactor
from .journal import Journal
from .plan import TurnPlan, checked_tools, compaction_data, step_settings, with_continue_checkpoint
from .request import TurnFailed, TurnOutcome, TurnRequest
from .settings import layered
from .step_attempts import RetriedSteps
from .step_stream import CallIds
from .structured_output import output_spec, parse_output
from .tool_calls import ToolCallRunner, ToolOutcome
from .ui_stream import AssistantMessageBuilder

if TYPE_CHECKING:
    from ..hooks.dispatch import HookDispatcher
    from ..store import AsyncStore

logger = logging.getLogger("think.turn")

__all__ = ["HistoryLoader", "Turn", "TurnDeps", "TurnFailed", "TurnOutcome", "TurnRequest"]


#: Reads the history the model sees again (after approved calls wrote their results into it).
HistoryLoader = Callable[[], Awaitable[list[ModelMessage]]]


@dataclass(frozen=True)
class TurnDeps:
    """What a turn uses, given once: hooks, store, the agent's tools, prompt, model and policies."""

    hooks: HookDispatcher
    db: AsyncStore
    tools: Mapping[str, AnyTool]
    system: str
    model: Any
    resolve_model: Callable[[Any], Any]
    max_steps: int
    retry: RetryConfig
    context_overflow: ContextOverflowConfig
    compactor: Compactor
    #: The agent's default settings (``Think(temperature=..., ...)``), under every turn's config.
    defaults: TurnConfig | None = None


class Turn(RetriedSteps):
    """Runs the steps of one turn. Created and driven by the runner under the turn lock.

    ``last_input_tokens`` carries the input size of the latest step across turns (the runner
    reads it back after the turn): the proactive guard compares it with its threshold.
    """

    deps: TurnDeps

    def __init__(
        self,
        deps: TurnDeps,
        session: Any,
        *,
        request_id: str,
        trigger: Trigger,
        continuation: bool,
        body: dict[str, Any] | None,
        builder: AssistantMessageBuilder,
        history: list[ModelMessage],
        reload_history: HistoryLoader | None = None,
        approvals: UIMessage | None = None,
        last_input_tokens: int = 0,
        journal: Journal,
        config: TurnConfig | None = None,
    ) -> None:
        self.deps = deps
        #: The agent's defaults with this call's config laid over them (see ``turn.settings``).
        self.call_config = layered(deps.defaults, config)
        self.journal = journal
        self.session = session
        self.hooks = deps.hooks
        self.request_id = request_id
        self.trigger = trigger
        self.continuation = continuation
        self.body = body
        self.builder = builder
        self.history = history
        self.last_input_tokens = last_input_tokens
        self.compactions: list[CompactionResult] = []
        self.steps: list[StepResult] = []
        self.usage = Usage()
        self.step_messages: list[ModelMessage] = []
        self.invalid_inputs: dict[str, str] = {}
        self.call_ids = CallIds()
        #: The plugins' ``transform_stream`` transforms, asked once per turn after ``before_turn``.
        self.stream_transforms: tuple[tuple[str, StreamTransform], ...] = ()
        self.base_messages: list[ModelMessage] = []
        self.messages_from_hook = False
        self.proactive_attempts = 0
        #: A continuation's message whose approved calls run in its first step (see ``approvals``),
        #: and how the turn reloads its history once they have.
        self.approvals = approvals
        self.reload_history = reload_history
        self.tool_runner = ToolCallRunner(
            session, request_id, self.hooks, builder, invalid_inputs=self.invalid_inputs, body=body, journal=journal
        )

    # ------------------------------------------------------------------------------------
    def base_tools(self) -> dict[str, AnyTool]:
        """The agent's tools plus the client tools the request body declares."""
        tools: dict[str, AnyTool] = dict(self.deps.tools)
        if self.body:
            for name, client_tool in client_tools_from(self.body.get("clientTools")).items():
                tools.setdefault(name, client_tool)
        return tools

    async def run(self) -> TurnOutcome:
        plan = await self._apply_turn_config(await self._before_turn())
        first = self._replay_steps()
        last = self.steps[-1] if self.steps else None
        if last is not None and {c.id for c in last.tool_calls} - {r.tool_call_id for r in last.tool_results}:
            return TurnOutcome("completed", usage=self.usage)  # it had ended waiting for a client / approval
        if last is not None and not last.tool_calls:
            first = plan.max_steps  # it had ended with its answer
        for step_number in range(first, plan.max_steps):
            await self._proactive_guard()
            planned = await self._step_request(step_number, plan)
            request, step_tools = planned[1], planned[2]
            step = self._journaled_step(step_number)
            if step is None:
                step, step_tools = await self._stream_step_with_retry(
                    step_number, planned, partial(self._step_request, step_number, plan)
                )
                if step.tool_calls:
                    await self.journal.step_streamed(step, self.builder.message)
            calls = step.tool_calls
            self.tool_runner.turn_usage = self.usage + step.usage
            outcomes = await self.tool_runner.run_all(step_number, calls, step_tools, request.messages) if calls else []
            await self._record_step(step, outcomes)
            if any(o.pending for o in outcomes):
                # A client tool or an approval is pending: the turn ends; an answer continues it.
                return TurnOutcome("completed", usage=self.usage)
            if not calls:
                break
        return TurnOutcome("completed", usage=self.usage, output=self._parse_output(plan.output))

    def _output_spec(self, output: Any) -> OutputSpec | None:
        try:
            return output_spec(output)
        except TypeError as exc:
            raise TurnFailed(exc, "turn") from exc

    def _parse_output(self, output: Any) -> Any:
        text = self.steps[-1].text if self.steps else ""
        try:
            return parse_output(output, text)
        except ValueError as exc:
            raise TurnFailed(ValueError(f"structured output did not validate: {exc}"), "stream") from exc

    # -- the rungs of run() ------------------------------------------------------------------
    async def _before_turn(self) -> TurnConfig:
        self._tools = self.base_tools()
        hooks = self.hooks
        if not (hooks.implements("before_turn") or hooks.implements("transform_stream")):
            return layered(self.call_config, None)
        ctx = TurnContext(
            session=self.session,
            request_id=self.request_id,
            trigger=self.trigger,
            system=self.call_config.system if self.call_config.system is not None else self.deps.system,
            messages=list(self.history),
            tools=dict(self._tools),
            model=self.deps.model,
            continuation=self.continuation,
            body=self.body,
        )
        try:
            config = layered(self.call_config, await self.hooks.before_turn(ctx))
            self.stream_transforms = await self.hooks.stream_transforms(ctx)
            if self.stream_transforms:
                self.builder.note_transforms([plugin for plugin, _ in self.stream_transforms])
        except Exception as exc:
            raise TurnFailed(exc, "turn") from exc
        return config

    async def _apply_turn_config(self, config: TurnConfig) -> TurnPlan:
        deps = self.deps
        try:
            model = deps.resolve_model(config.model) if config.model is not None else deps.model
            extra_tools = checked_tools(config.tools)
        except Exception as exc:  # a bad TurnConfig fails the turn, like a raising hook
            raise TurnFailed(exc, "turn") from exc
        if model is None:
            raise TurnFailed(RuntimeError("no model configured: pass Think(model=...)"), "turn")
        self.messages_from_hook = config.messages is not None
        self.base_messages = with_continue_checkpoint(
            list(config.messages) if config.messages is not None else list(self.history)
        )
        if config.send_reasoning is not None:
            self.builder.show_reasoning(config.send_reasoning)
        return TurnPlan(
            model=model,
            system=config.system if config.system is not None else deps.system,
            tools={**self._tools, **extra_tools},
            active_tools=config.active_tools,
            tool_choice=config.tool_choice,
            max_steps=config.max_steps if config.max_steps is not None else deps.max_steps,
            output=config.output,
            output_spec=self._output_spec(config.output),
            settings=config.call_settings(CallSettings()),
        )

    async def _step_request(
        self, step_number: int, plan: TurnPlan, retry: StepRetry | None = None
    ) -> tuple[Any, ModelRequest, dict[str, AnyTool]]:
        """``before_step``, then the model request of this step with its ``StepConfig`` applied
        (``retry``: again, after the step's previous attempt failed before any output)."""
        messages = self.base_messages + self.step_messages
        try:
            step_config = await self._before_step(step_number, plan, messages, retry) or StepConfig()
            model = self.deps.resolve_model(step_config.model) if step_config.model is not None else plan.model
        except Exception as exc:
            raise TurnFailed(exc, "turn") from exc
        active = step_config.active_tools if step_config.active_tools is not None else plan.active_tools
        tools = {n: t for n, t in plan.tools.items() if active is None or n in active}
        if self.approvals is not None:
            messages = await self._run_approvals(step_number, tools, messages)
        request = ModelRequest(
            system=step_config.system if step_config.system is not None else plan.system,
            messages=list(step_config.messages) if step_config.messages is not None else messages,
            tools=[ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in tools.values()],
            tool_choice=step_config.tool_choice if step_config.tool_choice is not None else plan.tool_choice,
            output=plan.output_spec,
            settings=step_settings(plan.settings, step_config.provider_options),
        )
        return model, request, tools

    async def _before_step(
        self, step_number: int, plan: TurnPlan, messages: list[ModelMessage], retry: StepRetry | None
    ) -> StepConfig | None:
        if not self.hooks.implements("before_step"):
            return None
        return await self.hooks.before_step(StepContext(
            session=self.session,
            request_id=self.request_id,
            step_number=step_number,
            steps=list(self.steps),
            model=plan.model,
            messages=messages,
            body=self.body,
            retry=retry,
        ))

    async def _run_approvals(
        self, step_number: int, tools: dict[str, AnyTool], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        """Run the approved calls of the continued message; the step's messages, with their results."""
        message, self.approvals = self.approvals, None
        assert message is not None
        updated = await run_approved_calls(message, self.builder, self._approved_runner, step_number, tools, messages)
        if updated is None:
            return messages
        await self.deps.db.upsert_message(self.session.id, updated)
        if self.messages_from_hook or self.reload_history is None:
            return messages  # before_turn chose the messages; the results are in the session
        self.history = await self.reload_history()
        self.base_messages = with_continue_checkpoint(list(self.history))
        return self.base_messages + self.step_messages

    def _approved_runner(self, builder: AssistantMessageBuilder, approved: frozenset[str]) -> ToolCallRunner:
        return ToolCallRunner(
            self.session, self.request_id, self.hooks, builder, approved=approved, body=self.body, journal=self.journal
        )

    async def _record_step(self, step: StepResult, outcomes: list[ToolOutcome]) -> None:
        """Add the finished step to the turn's record and the next step's messages, journal it,
        then ``on_step_finish``."""
        # In place: results built here need no assignment validation (a plugin's assignment gets it).
        step.tool_results[:] = [
            StepToolResult(tool_call_id=o.call.id, tool_name=o.call.name, output=o.output, error=o.error)
            for o in outcomes
            if not o.pending
        ]
        for o in outcomes:  # a sub-agent's turn, run by a call, counts in this step's usage
            if o.usage is not None and o.usage != Usage():
                step.usage = step.usage + o.usage
        self.builder.finish_step()
        self._remember_step(step)
        await self.journal.step_finished(step, self.builder.message)
        await self.hooks.on_step_finish(step)

    def _remember_step(self, step: StepResult) -> None:
        settled = {r.tool_call_id for r in step.tool_results}
        self.steps.append(step)
        self.usage = self.usage + step.usage
        self.builder.note_usage(step.model_id, step.usage)
        self.step_messages.append(
            AssistantMessage(
                text=step.text,
                reasoning=step.reasoning_text,
                reasoning_blocks=step.reasoning_blocks,
                tool_calls=[c for c in step.tool_calls if c.id in settled],
            )
        )
        self.step_messages.extend(
            ToolMessage(
                tool_call_id=r.tool_call_id,
                tool_name=r.tool_name,
                output=r.error if r.error is not None else r.output,
                is_error=r.error is not None,
            )
            for r in step.tool_results
        )
        self.last_input_tokens = step.usage.input_tokens or step.usage.total_tokens

    # -- resuming from the journal ---------------------------------------------------------
    def _stored_step(self, data: dict[str, Any]) -> StepResult:
        return StepResult(session=self.session, request_id=self.request_id, body=self.body, **data)

    def _replay_steps(self) -> int:
        """Take the steps an earlier owner of this durable turn finished as done; returns how many."""
        for data in self.journal.replay.steps:
            step = self._stored_step(data)
            self.call_ids.reserve(c.id for c in step.tool_calls)
            self._remember_step(step)
        return len(self.journal.replay.steps)

    def _journaled_step(self, step_number: int) -> StepResult | None:
        """The model output of this step, if an earlier owner stored it before running its tools."""
        data = self.journal.replay.streamed.get(step_number)
        if data is None:
            return None
        step = self._stored_step(data)
        self.call_ids.reserve(c.id for c in step.tool_calls)
        return step

    # ------------------------------------------------------------------------------------
    async def _proactive_guard(self) -> None:
        """Compact before a step once the last known input size passes the threshold."""
        proactive = self.deps.context_overflow.proactive
        if proactive is None or self.proactive_attempts >= proactive.max_compactions:
            return
        if self.last_input_tokens < proactive.threshold:
            return
        self.proactive_attempts += 1
        try:
            result = await self.deps.compactor.compact(self.session.id, reason="proactive")
        except Exception:
            logger.warning("proactive compaction failed; the step proceeds uncompacted", exc_info=True)
            return
        self.compactions.append(result)
        if not result.shortened:
            return
        self.builder.data("think-compaction", compaction_data(result))
        self.last_input_tokens = 0
        if not self.messages_from_hook:
            self.base_messages = with_continue_checkpoint(to_model_messages(await self.deps.db.history(self.session.id)))
