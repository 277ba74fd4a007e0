"""Running the tool calls of a step: validation, ``before_tool_call``, then a human's approval
when the tool needs one or the hook asked for it, execution (or block / substitute),
``transform_tool_result``, ``after_tool_call`` and the ``tool-result`` chunk, per call.

Calls of one step run concurrently. Whatever goes wrong with a call — an unknown tool,
arguments that are not JSON or do not validate, a raising decision hook or tool — becomes an
error result for the model, never a failed turn.

In a durable turn (a ``TurnJournal``; other turns have a null journal), a call is journaled as started before it runs and its
result as soon as it is known, so each side effect happens at most once: on recovery a stored
result is reused, and a call that started without one runs again only if its tool is
idempotent or read-only — otherwise the model (and ``after_tool_call``) gets an error result
saying it was interrupted. A tool that honours its call's idempotency key
(``idempotent_with_key``) runs again too, with the same key: the key is derived from the session,
the turn's request id (a durable submission's id), the step and the call id, all of which the
journal restores.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import HookTimeout, PluginError
from ..events import ToolResult, Usage
from ..models.base import ModelMessage, ToolCallRequest
from ..threads import blocking_threads
from ..tools import AnyTool, ToolContext, ToolInputError
from ..types import (
    ChunkContext,
    SessionView,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    ToolDecisionAction,
)
from .journal import INTERRUPTED_CALL, Journal
from .tool_output import describe_error, idempotency_key, jsonable
from .ui_stream import AssistantMessageBuilder

if TYPE_CHECKING:
    from ..hooks.dispatch import HookDispatcher

logger = logging.getLogger("think.tools")

BLOCKED_DEFAULT = 'Tool "{name}" was blocked by before_tool_call.'


@dataclass
class ToolOutcome:
    """One call's result; ``pending`` calls wait for a client result or a human approval."""

    call: ToolCallRequest
    output: Any = None
    error: str | None = None
    pending: bool = False
    #: What the call spent on models of its own (a sub-agent's turn), counted in the turn's usage.
    usage: Usage | None = None


class ToolCallRunner:
    """Runs tool calls for one turn, writing their parts into ``builder``.

    :param approved: ids of ``needs_approval`` calls a human approved (they run; others wait).
    :param invalid_inputs: raw arguments of calls whose input was not a JSON object, by call id.
    :param body: the turn's body, handed to the hooks on every context.
    :param journal: what the turn records (a durable turn's step journal, or a null one).
    """

    def __init__(
        self,
        session: SessionView,
        request_id: str,
        hooks: HookDispatcher,
        builder: AssistantMessageBuilder,
        *,
        approved: frozenset[str] = frozenset(),
        invalid_inputs: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
        journal: Journal,
    ) -> None:
        self.journal = journal
        self.session = session
        self.request_id = request_id
        self.hooks = hooks
        self.builder = builder
        self.approved = approved
        self.invalid_inputs = invalid_inputs if invalid_inputs is not None else {}
        self.body = body
        #: The turn's usage so far, the calling step's included (``ToolCallContext.usage``).
        self.turn_usage = Usage()

    async def run_all(
        self, step_number: int, calls: list[ToolCallRequest], tools: dict[str, AnyTool], messages: list[ModelMessage]
    ) -> list[ToolOutcome]:
        if len(calls) == 1:
            return [await self._run_one(step_number, calls[0], tools, messages)]
        return list(await asyncio.gather(*(self._run_one(step_number, c, tools, messages) for c in calls)))

    async def _run_one(
        self, step_number: int, call: ToolCallRequest, tools: dict[str, AnyTool], messages: list[ModelMessage]
    ) -> ToolOutcome:
        tool = tools.get(call.name)
        invalid_raw = self.invalid_inputs.get(call.id)
        model_input = call.input
        started = time.perf_counter()
        decision: ToolDecisionAction = "allow"
        replayed = await self._from_journal(step_number, call, tool, messages, started)
        if replayed is not None:
            return replayed
        if tool is None:
            available = ", ".join(sorted(tools)) or "none"
            return await self._finish(
                step_number, call, tool, messages, started, decision,
                error=f"Unknown tool {call.name!r}. Available tools: {available}.",
            )
        if invalid_raw is not None:
            return await self._finish(
                step_number, call, tool, messages, started, decision,
                error=f"Invalid arguments for tool {call.name!r}: expected a JSON object, got {invalid_raw!r}.",
            )
        try:
            validated = tool.validate_input(model_input)
        except ToolInputError as exc:
            return await self._finish(step_number, call, tool, messages, started, decision, error=str(exc))

        if tool.is_client:
            return ToolOutcome(call, pending=True)

        decided = await self._decide(step_number, call, tool, validated, messages, started)
        if isinstance(decided, ToolOutcome):
            return decided
        verdict, decided_by = decided
        if verdict is not None and verdict.action == "block":
            decision = "block"
            output = verdict.reason or BLOCKED_DEFAULT.format(name=call.name)
            return await self._finish(
                step_number, call, tool, messages, started, decision, output=output, decided_by=decided_by
            )
        if verdict is not None and verdict.action == "substitute":
            return await self._finish(
                step_number, call, tool, messages, started, "substitute", output=verdict.output, decided_by=decided_by
            )
        if call.id in self.approved:
            # A human approved these very arguments (a rewrite was applied before asking): they run.
            run_input = validated
        elif tool.annotations.needs_approval or (verdict is not None and verdict.action == "ask"):
            return self._ask(call, verdict, decided_by)
        else:
            run_input = verdict.input if verdict is not None and verdict.input is not None else validated
        await self.journal.tool_started(call.id)
        return await self._run_tool(step_number, call, tool, run_input, messages, started, decided_by)

    def _ask(self, call: ToolCallRequest, verdict: ToolCallDecision | None, decided_by: str | None) -> ToolOutcome:
        """Hold the call for a human: ``before_tool_call`` has had its say, so a rewrite is what
        the human sees (and what runs once approved) and a plugin's ``ask`` shows its reason."""
        if verdict is not None and verdict.action == "allow" and verdict.input is not None:
            self.builder.tool_input_available(call.id, call.name, verdict.input)
        reason = None
        if verdict is not None and verdict.action == "ask":
            reason = verdict.reason
            self.builder.note_decision(call.id, "ask", decided_by, reason)
        self.builder.tool_approval_requested(call.id, reason)
        return ToolOutcome(call, pending=True)

    async def _run_tool(
        self,
        step_number: int,
        call: ToolCallRequest,
        tool: AnyTool,
        run_input: dict[str, Any],
        messages: list[ModelMessage],
        started: float,
        decided_by: str | None,
    ) -> ToolOutcome:
        """Run an allowed call (journaled as started) and finish it with its output or error."""
        # Only a tool that takes the call's context gets one (and only it can add usage to it).
        context = self._tool_context(step_number, call) if tool.context_parameter is not None else None
        try:
            output = await self._execute(step_number, tool, call, self._with_context(tool, run_input, context))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outcome = await self._finish(
                step_number, call, tool, messages, started, "allow", error=describe_error(exc), decided_by=decided_by
            )
        else:
            outcome = await self._finish(
                step_number, call, tool, messages, started, "allow", output=output, decided_by=decided_by
            )
        if context is not None:
            outcome.usage = context.usage
        return outcome

    def _tool_context(self, step_number: int, call: ToolCallRequest) -> ToolContext:
        return ToolContext(
            session_id=self.session.id,
            request_id=self.request_id,
            step_number=step_number,
            tool_call_id=call.id,
            tool_name=call.name,
            idempotency_key=idempotency_key(self.session.id, self.request_id, step_number, call.id),
            body=self.body,
            plugins=self.hooks.plugins,
        )

    @staticmethod
    def _with_context(tool: AnyTool, run_input: dict[str, Any], context: ToolContext | None) -> dict[str, Any]:
        if tool.context_parameter is None or context is None:
            return run_input
        return {**run_input, tool.context_parameter: context}

    async def _decide(
        self,
        step_number: int,
        call: ToolCallRequest,
        tool: AnyTool,
        validated: dict[str, Any],
        messages: list[ModelMessage],
        started: float,
    ) -> tuple[ToolCallDecision | None, str | None] | ToolOutcome:
        """``before_tool_call``'s verdict and who gave it; or the outcome of a call the hook
        failed for (a guard that timed out blocks it: fail closed; any other failure fails it)."""
        if not self.hooks.implements("before_tool_call"):
            return None, None
        ctx = ToolCallContext(**self._call_fields(step_number, call, tool, messages), input=validated, usage=self.turn_usage)
        try:
            return await self.hooks.decide_tool_call(ctx)
        except HookTimeout as exc:
            # Fail closed: a guard that did not answer in time must not let the call through.
            logger.warning("tool call %s of %s blocked: %s", call.id, call.name, exc)
            output = f'Tool "{call.name}" was blocked: {exc}.'
            return await self._finish(
                step_number, call, tool, messages, started, "block", output=output, decided_by=exc.plugin_name
            )
        except Exception as exc:
            # The error names the plugin (PluginError); the call fails, the turn goes on.
            logger.warning("tool call %s of %s not run: %s", call.id, call.name, exc)
            return await self._finish(step_number, call, tool, messages, started, "allow", error=describe_error(exc))

    async def _from_journal(
        self,
        step_number: int,
        call: ToolCallRequest,
        tool: AnyTool | None,
        messages: list[ModelMessage],
        started: float,
    ) -> ToolOutcome | None:
        """The outcome of a call an earlier owner of the turn already settled or started; ``None``
        for a call to run now (never started, or started and safe to repeat)."""
        replay = self.journal.replay
        stored = replay.results.get(call.id)
        if stored is not None:  # reused as it is: no hook runs again for it
            output, error = stored.get("output"), stored.get("error")
            if error is None:
                self.builder.tool_output(call.id, output)
            else:
                self.builder.tool_error(call.id, error)
            return ToolOutcome(call, output=output, error=error)
        if call.id not in replay.started:
            return None
        if tool is not None and (tool.annotations.idempotent or tool.annotations.read_only):
            logger.info("tool call %s of %s was interrupted; running it again (idempotent)", call.id, call.name)
            return None
        if tool is not None and tool.annotations.idempotent_with_key:
            logger.info("tool call %s of %s was interrupted; running it again with the same idempotency key",
                        call.id, call.name)
            return None
        logger.warning("tool call %s of %s was interrupted and is not run again", call.id, call.name)
        return await self._finish(
            step_number, call, tool, messages, started, "allow", error=INTERRUPTED_CALL, interrupted=True
        )

    async def _execute(self, step_number: int, tool: AnyTool, call: ToolCallRequest, run_input: dict[str, Any]) -> Any:
        function = tool.function
        if function is None:  # a client tool: its calls wait for the client and never get here
            raise TypeError(f"tool {tool.name!r} has no implementation to run")
        if tool.is_generator:
            return await self._consume(step_number, call, function(**run_input))
        if tool.is_async:
            result = await function(**run_input)
        else:
            # A plain function may block (file or network I/O): run it in a worker thread so the
            # other sessions' turns keep streaming. The context (and so the nested-turn guard) is
            # copied. think's own threads, not the loop's executor: a result goes straight to its
            # future, and the step's parallel calls that end together wake the loop once.
            result = await blocking_threads().run(function, **run_input)
            if inspect.isawaitable(result):
                result = await result
        if isinstance(result, AsyncIterable):  # returned, not written as a generator: the same contract
            return await self._consume(step_number, call, result)
        return result

    async def _consume(self, step_number: int, call: ToolCallRequest, results: AsyncIterable[Any]) -> Any:
        """Each item of a streaming tool is a preliminary result; the last one is the result."""
        last: Any = None
        observers = self.hooks.chunk_observers
        transforms = self.hooks.transforms_tool_results
        async for value in results:
            last = value
            shown = jsonable(value)
            if transforms:  # what a client sees of the call must be rewritten too
                shown, _ = await self.hooks.transform_tool_result(
                    self._result_context(step_number, call, None, [], success=True, output=shown, preliminary=True),
                    jsonable,
                )
            self.builder.tool_output(call.id, shown, preliminary=True)
            if observers:
                self.hooks.emit_chunk(
                    ChunkContext(
                        self.session, self.request_id, step_number,
                        ToolResult(call.id, call.name, shown if transforms else value, preliminary=True), self.body,
                    )
                )
        return last

    async def _finish(
        self,
        step_number: int,
        call: ToolCallRequest,
        tool: AnyTool | None,
        messages: list[ModelMessage],
        started: float,
        decision: ToolDecisionAction,
        *,
        output: Any = None,
        error: str | None = None,
        interrupted: bool = False,
        decided_by: str | None = None,
    ) -> ToolOutcome:
        duration_ms = (time.perf_counter() - started) * 1000.0
        output = jsonable(output)
        if error is None and self.hooks.transforms_tool_results:
            output, error = await self._transformed(step_number, call, tool, messages, output, decision, decided_by)
        if decision != "allow":  # every client shows who blocked or substituted it, from the store
            self.builder.note_decision(call.id, decision, decided_by)
        if error is None:
            self.builder.tool_output(call.id, output)
        else:
            self.builder.tool_error(call.id, error)
        await self.journal.tool_finished(call.id, output, error)
        if self.hooks.implements("after_tool_call"):
            await self.hooks.after_tool_call(
                self._result_context(
                    step_number, call, tool, messages,
                    success=error is None, output=output, error=error, duration_ms=duration_ms,
                    decision=decision, interrupted=interrupted, decided_by=decided_by,
                )
            )
        if self.hooks.chunk_observers:
            self.hooks.emit_chunk(
                ChunkContext(
                    self.session, self.request_id, step_number, ToolResult(call.id, call.name, output, error), self.body
                )
            )
        return ToolOutcome(call, output=output, error=error)


    async def _transformed(
        self,
        step_number: int,
        call: ToolCallRequest,
        tool: AnyTool | None,
        messages: list[ModelMessage],
        output: Any,
        decision: ToolDecisionAction,
        decided_by: str | None,
    ) -> tuple[Any, str | None]:
        """The output as ``transform_tool_result`` rewrote it, or, when a transform failed, no
        output and an error naming the plugin: fail closed, the unmasked output is never shown."""
        ctx = self._result_context(
            step_number, call, tool, messages, success=True, output=output, decision=decision, decided_by=decided_by
        )
        try:
            output, changed_by = await self.hooks.transform_tool_result(ctx, jsonable)
        except PluginError as exc:
            logger.warning("tool call %s of %s: its result is withheld: %s", call.id, call.name, exc)
            return None, f"The result of tool {call.name!r} was withheld: {exc}"
        if changed_by:  # every client shows who rewrote it, from the store
            self.builder.note_rewrite(call.id, changed_by)
        return output, None

    def _call_fields(
        self, step_number: int, call: ToolCallRequest, tool: AnyTool | None, messages: list[ModelMessage]
    ) -> dict[str, Any]:
        """What the call's hook contexts (before and after it ran) say of it alike."""
        return dict(session=self.session, request_id=self.request_id, body=self.body, step_number=step_number,
                    tool_call_id=call.id, tool_name=call.name, tool=tool, messages=messages)

    def _result_context(
        self, step_number: int, call: ToolCallRequest, tool: AnyTool | None, messages: list[ModelMessage],
        **outcome: Any,
    ) -> ToolCallResultContext:
        return ToolCallResultContext(**self._call_fields(step_number, call, tool, messages), input=call.input, **outcome)
