"""The hook specifications of think: the reference for plugin authors.

A plugin is any object (module, class instance) with methods marked ``@hookimpl`` whose names
match the specs below. An implementation may ask for any subset of a spec's parameters, by
name. Implementations may be ``def`` or ``async def``, except ``on_chunk`` (sync only).

Order: pluggy's — the plugin registered last runs first (LIFO); ``tryfirst=True`` /
``trylast=True`` move an implementation to the front / back. Entry-point plugins are
registered before ``Think(plugins=[...])``, so explicitly passed plugins run first.

*firstresult* hooks stop at the first implementation that returns something other than
``None`` (decided after awaiting, so an ``async def`` that returns ``None`` does not count).
*broadcast* hooks call every implementation, in order, awaiting each.

Failure policy (what happens when an implementation raises) is given per hook.

A turn fires, in order::

    before_turn
    for each step: before_step, on_chunk*, (before_tool_call, after_tool_call, on_chunk)*, on_step_finish
    on_chat_response            (after persistence and after the session's turn lock is released)

with ``classify_chat_error`` and ``on_chat_error`` on the error path.
"""

from __future__ import annotations

from typing import Any, Optional

from .markers import hookspec
from .types import (
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    StepConfig,
    StepContext,
    StepResult,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    TurnConfig,
    TurnContext,
)

# The hooks whose result decides something: the first non-None result wins.
FIRSTRESULT_HOOKS = frozenset(
    {"before_turn", "before_step", "before_tool_call", "on_chat_error", "classify_chat_error"}
)
# Hooks whose implementations must be plain functions.
SYNC_ONLY_HOOKS = frozenset({"on_chunk"})


@hookspec
def configure_session(session: Any) -> None:
    """Prepare per-session plugin state.

    Fires once when a session is first opened in a process (``agent.session(id)``), never per
    turn. Use ``session.state_for(self)`` for state that must not leak between sessions.

    :param session: the :class:`~think_core.session.Session` (``id``, ``settings``, ``state``).
    :returns: ignored.

    Broadcast. If an implementation raises, opening the session fails with a
    :class:`~think_core.errors.PluginError` naming the plugin.
    """


@hookspec(firstresult=True)
def before_turn(ctx: TurnContext) -> Optional[TurnConfig]:
    """Inspect or change a turn before its first model call.

    Fires once per turn (and again when context-overflow recovery re-runs it), after the
    incoming messages are persisted and the turn context is assembled.

    :param ctx: ``session``, ``request_id``, ``trigger`` (the entry path: ``chat``, ``stream``,
        ``save_messages``, ``submit``, ``continue``, ``auto_continue``, ``websocket``, ``http``),
        ``system``, ``messages`` (model messages), ``tools`` (name → Tool), ``model``,
        ``continuation``, ``body`` (extra client data for this turn, or ``None``).
    :returns: a :class:`~think_core.types.TurnConfig` to change the model, system prompt,
        messages, tools (additive), ``active_tools``, ``tool_choice``, ``max_steps``,
        ``send_reasoning``, structured ``output`` or call settings; ``None`` keeps the defaults.

    firstresult. If an implementation raises, the turn fails at stage ``"turn"`` (fail closed).
    """


@hookspec(firstresult=True)
def before_step(ctx: StepContext) -> Optional[StepConfig]:
    """Adjust one model step.

    Fires before every model call of a turn, after the proactive context guard.

    :param ctx: ``session``, ``request_id``, ``step_number`` (0-based), ``steps`` (the
        :class:`~think_core.types.StepResult` of earlier steps of this turn), ``model``,
        ``messages`` (what will be sent).
    :returns: a :class:`~think_core.types.StepConfig` (``model``, ``active_tools``,
        ``tool_choice``, ``system``, ``messages``) or ``None`` to keep the turn's values.

    firstresult. If an implementation raises, the turn fails at stage ``"turn"``.
    """


@hookspec
def on_chunk(ctx: ChunkContext) -> None:
    """Observe one streamed event. **Hot path**: fires for every token.

    Fires for every event of the model stream (``text-delta``, ``reasoning-delta``,
    ``tool-input-start``, ``tool-input-delta``, ``tool-call``) and for every tool result
    (``tool-result``, with ``preliminary=True`` for the intermediate yields of generator tools).

    :param ctx: ``session``, ``request_id``, ``step_number``, ``chunk`` (a
        :mod:`think_core.events` object; switch on ``chunk.type``).
    :returns: ignored.

    Must be a plain ``def``: an ``async def`` implementation is refused at registration. Do no
    I/O here — buffer, and flush in ``on_step_finish``. If an implementation raises, the error
    is logged with the plugin's name and the turn carries on.
    """


@hookspec(firstresult=True)
def before_tool_call(ctx: ToolCallContext) -> Optional[ToolCallDecision]:
    """Decide whether a tool call runs.

    Fires for every tool call the model makes, after the step's stream ended and the input
    was validated, before the tool runs. Calls of one step are handled concurrently.

    :param ctx: ``session``, ``request_id``, ``step_number``, ``tool_call_id``, ``tool_name``,
        ``input`` (validated arguments), ``tool`` (the :class:`~think_core.tools.Tool`, with
        ``annotations``), ``messages``.
    :returns: ``allow(input=None)`` (run it, optionally with rewritten input), ``block(reason)``
        (do not run; the model gets ``reason`` or ``Tool "<name>" was blocked by
        before_tool_call.``), ``substitute(output)`` (do not run; the model gets ``output``), or
        ``None``, which allows the call.

    firstresult. If an implementation raises, this call fails: the model receives an error
    result, ``after_tool_call`` sees ``success=False``, and the turn continues.
    """


@hookspec
def after_tool_call(ctx: ToolCallResultContext) -> None:
    """Observe the outcome of a tool call.

    Fires for every tool call, whatever the decision (executed, blocked, substituted, failed).

    :param ctx: the call's fields (``input`` is the model's original input) plus ``success``
        (``False`` only when execution or the decision hook raised), ``output``, ``error``,
        ``duration_ms`` and ``decision`` (``"allow"``, ``"block"`` or ``"substitute"``).
    :returns: ignored.

    Broadcast. If an implementation raises, the error is logged with the plugin's name and
    the other implementations and the turn carry on.
    """


@hookspec
def on_step_finish(ctx: StepResult) -> None:
    """Observe a finished model step.

    Fires after each step's stream ended and its tool calls ran.

    :param ctx: ``step_number``, ``finish_reason``, ``text``, ``reasoning_text``,
        ``tool_calls``, ``tool_results``, ``usage`` (input/output/total/reasoning/cached
        tokens), ``model_id``, ``response_id``, ``warnings``, ``provider_metadata``.
    :returns: ignored.

    Broadcast. If an implementation raises, the error is logged with the plugin's name and
    the other implementations and the turn carry on.
    """


@hookspec
def on_chat_response(result: ChatResponseResult) -> None:
    """Observe the end of a turn.

    Fires once per turn after the assistant message is persisted **and** the session's turn
    lock is released, so calling ``session.save_messages(...)`` from here chains a new turn.

    :param result: ``message`` (the persisted assistant UI message; may have no parts),
        ``status`` (``"completed"``, ``"error"``, ``"aborted"``), ``continuation``, ``error``,
        ``output`` (parsed structured output, when asked for), ``usage`` (turn total).
    :returns: ignored.

    Broadcast. If an implementation raises, the error is logged with the plugin's name and
    the other implementations and the turn carry on.
    """


@hookspec(firstresult=True)
def on_chat_error(error: BaseException, ctx: ChatErrorContext) -> Optional[Any]:
    """Replace or observe a terminal turn error.

    Fires once when a turn fails for good (after any recovery or retry), for errors raised
    before streaming and errors that arrive inside the model stream alike.

    :param error: the exception.
    :param ctx: ``session``, ``request_id``, ``stage`` (``"parse"``, ``"persist"``, ``"turn"``,
        ``"stream"``), ``messages_persisted``, ``classification``.
    :returns: a replacement (an exception, or a message string) reported instead of
        ``error``, or ``None`` to keep the original.

    firstresult. If an implementation raises, it is logged and the original error stands.
    """


@hookspec(firstresult=True)
def classify_chat_error(error: BaseException, ctx: ChatErrorContext) -> Optional[str]:
    """Classify a turn error so the engine can recover from it.

    Fires for every turn error (HTTP errors and in-stream error events) before the engine
    decides between recovery, retry and failure.

    :param error: the exception (often a :class:`~think_core.errors.ProviderError` with
        ``status``, ``code``, ``message``, ``headers``, ``body``).
    :param ctx: as for ``on_chat_error``.
    :returns: ``"context_overflow"`` (compact and retry when reactive recovery is on),
        ``"rate_limit"`` / ``"transient"`` (bounded retry when nothing was streamed in the failed
        step), ``"fatal"`` / ``"unknown"`` (fail now), or ``None`` for no opinion.

    firstresult. If an implementation raises, it is logged and treated as ``None``.
    """
