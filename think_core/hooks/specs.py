"""The hook specifications of think: the reference for plugin authors.

A plugin is any object (module, class instance) with methods marked ``@hookimpl`` whose names
match the specs below. An implementation may ask for any subset of a spec's parameters, by
name. Implementations may be ``def`` or ``async def``, except ``on_chunk`` and
``register_commands`` (sync only).

Order: pluggy's — the plugin registered last runs first (LIFO); ``tryfirst=True`` /
``trylast=True`` move an implementation to the front / back. Entry-point plugins are
registered before ``Think(plugins=[...])``, so explicitly passed plugins run first.

*firstresult* hooks stop at the first implementation that returns something other than
``None`` (decided after awaiting, so an ``async def`` that returns ``None`` does not count).
*broadcast* hooks call every implementation, in order, awaiting each.

Failure policy (what happens when an implementation raises) is given per hook. An
implementation that runs past its time limit (``Think(hook_timeout=30.0)``, or the plugin's own
``hook_timeout`` setting or attribute; ``None``: no limit) fails with
:class:`~think_core.errors.HookTimeout` under the same policy — a ``before_tool_call`` that times
out blocks the call. ``async def`` implementations are cancelled at the limit; a plain ``def``
cannot be interrupted, and holding the event loop stalls every session, so think warns once per
plugin and hook when one blocks longer than 100 ms.

A turn fires, in order::

    before_turn, transform_stream
    for each step: before_step, on_chunk*,
                   (before_tool_call, transform_tool_result, after_tool_call, on_chunk)*, on_step_finish
    on_chat_response            (after persistence and after the session's turn lock is released)

with ``classify_chat_error`` and ``on_chat_error`` on the error path. ``configure_session``
fires when a session opens, ``register_commands`` when the ``think`` command line builds its
parser; neither belongs to a turn. A call that needs a human (``needs_approval``, or ``ask``)
is decided first, then waits: the turn ends; the approval's continuation runs it inside its
first step (``before_turn``, ``before_step``, the call), before that step's model call.

Each hook's docstring ends with **Think:** — what is deliberately different from Think, the
TypeScript framework these hooks follow, for someone porting a Think agent.

What every context carries (``TurnContext``, ``StepContext``, ``ChunkContext``,
``ToolCallContext``, ``ToolCallResultContext``, ``StepResult``, ``ChatResponseResult``,
``ChatErrorContext``):

* ``session`` — a :class:`~think_core.types.SessionView`: ``id``, ``settings`` (the agent's
  per-plugin settings), ``state`` (shared by the session's plugins) and ``state_for(plugin)``
  (private to one plugin). The live session: use nothing else of it;
* ``request_id`` — the turn's id (also the id ``session.cancel(request_id)`` takes);
* ``body`` — the turn's extra client data (``body=`` of the entry point, or the extra fields of
  a server request), or ``None``; a continuation without one sees its turn's.

The model messages a context lists are shared with the session's later turns: never edit one in
place (return new ones, ``TurnConfig(messages=...)``).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..types import (
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    SessionView,
    StepConfig,
    StepContext,
    StepResult,
    StreamTransform,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    TurnConfig,
    TurnContext,
)
from .markers import hookspec

# Hooks whose implementations must be plain functions, and why (said when an ``async def``
# implementation is refused at registration).
SYNC_ONLY_HOOKS: dict[str, str] = {
    "on_chunk": "it runs synchronously for every streamed token. Buffer in it and do I/O in on_step_finish.",
    "register_commands": "the command line calls it while it builds its parser, before any event loop runs.",
}


@hookspec
def configure_session(session: SessionView) -> None:
    """Prepare per-session plugin state.

    Fires once when a session is first opened in a process (``agent.session(id)``), never per
    turn. Use ``session.state_for(self)`` for state that must not leak between sessions.

    :param session: the session, seen as a :class:`~think_core.types.SessionView` (``id``,
        ``settings``, ``state``, ``state_for``).
    :returns: ignored.

    Broadcast. If an implementation raises, opening the session fails with a
    :class:`~think_core.errors.PluginError` naming the plugin.

    **Think:** ``configureSession`` returns the session it builds; this hook customises the
    session it is given (its state) and returns nothing.
    """


@hookspec(firstresult=True)
def before_turn(ctx: TurnContext) -> TurnConfig | None:
    """Inspect or change a turn before its first model call.

    Fires once per turn (and again when context-overflow recovery re-runs it), after the
    incoming messages are persisted and the turn context is assembled.

    :param ctx: ``session``, ``request_id``, ``trigger`` (the entry path: ``chat``, ``stream``,
        ``save_messages``, ``submit``, ``continue``, ``auto_continue``, ``websocket``, ``http``),
        ``system``, ``messages`` (model messages), ``tools`` (name → Tool), ``model``,
        ``continuation``, ``body`` (extra client data for this turn, or ``None``).
    :returns: a :class:`~think_core.types.TurnConfig` (or a dict of its fields) to change the
        model, system prompt, messages, tools (additive), ``active_tools``, ``tool_choice``,
        ``max_steps``, ``send_reasoning``, structured ``output`` or call settings; ``None``
        keeps the defaults. A dict may use Think's camelCase keys (``activeTools``,
        ``toolChoice``, ``maxSteps``, ``sendReasoning``, ``providerOptions``,
        ``maxOutputTokens``, ``stopSequences``, ``instructions`` for ``system`` …).

    firstresult. If an implementation raises, or returns something that is not a
    ``TurnConfig`` — including a dict with a key that names no field, which Think would ignore
    — the turn fails at stage ``"turn"`` (fail closed) with a
    :class:`~think_core.errors.PluginError` naming the plugin and the key.

    **Think:** an unknown key fails the turn instead of being ignored. ``providerOptions`` are
    keyed by provider name as in the AI SDK; keys that name no provider are also merged into
    the body as they are. ``sendReasoning: false`` also keeps the reasoning out of every
    message served back (``messages()``, snapshots, the HTTP API); it is stored, hidden, for
    the model's later turns. In an approval's continuation, ``ctx.messages`` do not yet have
    the approved calls' results (the calls run in the first step, after ``before_step``).
    """


@hookspec(firstresult=True)
def before_step(ctx: StepContext) -> StepConfig | None:
    """Adjust one model step.

    Fires before every model call of a turn, after the proactive context guard.

    Fires again for the same step when its attempt failed before any output: ``ctx.retry``
    (a :class:`~think_core.types.StepRetry`: ``attempt`` from 1, the ``error``, its
    ``classification`` from ``classify_chat_error``, the ``model`` that failed) is set then and
    ``None`` on a step's first attempt. Answering a retry with ``StepConfig(model=...)`` (a model
    string or instance) naming another model asks that model at once — the bundled ``fallback``
    plugin does so; with the same model (or no answer) a ``transient`` / ``rate_limit`` failure is
    retried after the retry policy's delay and any other one ends the turn. A step that has
    streamed output is never retried.

    :param ctx: ``session``, ``request_id``, ``body``, ``step_number`` (0-based), ``steps``
        (the :class:`~think_core.types.StepResult` of earlier steps of this turn), ``model``,
        ``messages`` (what will be sent), ``retry``.
    :returns: a :class:`~think_core.types.StepConfig` (``model``, ``active_tools``,
        ``tool_choice``, ``system``, ``messages``, ``provider_options`` — deep-merged over the
        turn's; or a dict of them, camelCase keys as in Think accepted) or ``None`` to keep the
        turn's values.

    firstresult. If an implementation raises, or returns something that is not a
    ``StepConfig`` (a dict with a key that names no field included), the turn fails at stage
    ``"turn"`` with a :class:`~think_core.errors.PluginError` naming the plugin (and the key).

    **Think:** a failed step is not handed back to ``beforeStep``; here ``ctx.retry`` lets a
    plugin move it to another model. An unknown key fails the turn instead of being ignored. The ``active_tools`` of
    the first step of an approval's continuation also govern the approved calls: a call to a
    tool left out is answered with an error instead of running.
    """


@hookspec
def on_chunk(ctx: ChunkContext) -> None:
    """Observe one streamed event. **Hot path**: fires for every token.

    Fires for every event of the model stream (``text-delta``, ``reasoning-delta``,
    ``tool-input-start``, ``tool-input-delta``, ``tool-call``, ``source`` — a ``UrlSource`` or
    ``DocumentSource`` the answer cites — and ``file``, a ``GeneratedFile``) and for every tool result (``tool-result``, with ``preliminary=True`` for the intermediate yields of
    generator tools). A ``reasoning-delta`` may carry only ``provider_metadata`` and no text
    (Anthropic's signature at the end of a thinking block). A ``source`` comes each time the
    model cites it; ``StepResult.sources`` lists each once.

    :param ctx: ``session``, ``request_id``, ``body``, ``step_number``, ``chunk`` (a
        :mod:`think_core.events` object; switch on ``chunk.type``).
    :returns: ignored.

    Must be a plain ``def``: an ``async def`` implementation is refused at registration. Do no
    I/O here — buffer, and flush in ``on_step_finish``. If an implementation raises, the error
    is logged with the plugin's name and the turn carries on.

    **Think:** ``onChunk`` may return a promise; here the hook is sync-only, because it runs per
    token. ``source`` chunks are here (one type for both kinds, told apart by ``source_type``
    as the AI SDK's ``sourceType``); there are no ``raw`` chunks.
    """


@hookspec(firstresult=True)
def before_tool_call(ctx: ToolCallContext) -> ToolCallDecision | None:
    """Decide whether a tool call runs.

    Fires for every tool call the model makes, after the step's stream ended and the input
    was validated, before the tool runs. Calls of one step are handled concurrently.

    :param ctx: ``session``, ``request_id``, ``body`` (the turn's, e.g. a per-turn mode
        switch), ``step_number``, ``tool_call_id``, ``tool_name``, ``input`` (validated
        arguments), ``tool`` (the :class:`~think_core.tools.Tool`, with ``annotations``),
        ``messages``, ``usage`` (the turn's tokens so far, the step that called the tool
        included: what a budget compares with its limit).
    :returns: ``allow(input=None)`` (run it, optionally with rewritten input), ``block(reason)``
        (do not run; the model gets ``reason`` or ``Tool "<name>" was blocked by
        before_tool_call.``), ``substitute(output)`` (do not run; the model gets ``output``),
        ``ask(reason=None)`` (run it only once a human approves: the call waits exactly like a
        ``needs_approval`` tool's, and the approval request shows ``reason``), or ``None``,
        which allows the call.

    Approval comes after the guards: for a call that will ask a human this hook runs first, so a
    ``block`` or ``substitute`` settles it without asking anyone, and an ``allow(input=...)``
    rewrite is what the person sees and what runs once approved. It fires again when the
    approved call runs (in the continuation, with that turn's state): a ``block`` or
    ``substitute`` still wins; an ``ask`` or a new rewrite does not apply.

    firstresult. If an implementation raises, or returns something that is not a
    ``ToolCallDecision`` (or a dict of its fields and no other key), this call fails with a
    :class:`~think_core.errors.PluginError` naming the plugin: the model receives an error
    result, ``after_tool_call`` sees ``success=False``, and the turn continues.

    **Think:** Think asks for approval before ``beforeToolCall``; here the hook decides first
    and again at execution. ``ask`` is Think's ``needsApproval`` function, from any plugin. A
    tool returning an async iterable streams preliminary results like a generator tool.
    """


@hookspec
def transform_tool_result(ctx: ToolCallResultContext) -> Any | None:
    """Rewrite a tool call's output before anyone sees it (mask a card number, trim a page).

    Fires for every call with an output (run, substituted, blocked — the reason is its output —
    and each preliminary yield, ``ctx.preliminary``), before the model, the store, the UI stream,
    the journal, ``tool_cache`` and ``after_tool_call`` see it; not for failed calls.

    :param ctx: as ``after_tool_call``'s; ``output`` is the output rewritten so far, in JSON form
        (a tool's :class:`~think_core.File` is a ``{"type": "file", "mediaType", "url"}`` item).
    :returns: the replacement output, or ``None`` to keep it. Chained in hook order: each
        implementation sees what the ones before it made.

    Fails closed: if an implementation raises (or times out), the call's result is an error
    naming the plugin and the output is never shown; the turn goes on.

    **Think:** no Think counterpart (``afterToolCall`` only observes).
    """


@hookspec
def transform_stream(ctx: TurnContext) -> StreamTransform | None:
    """Offer a transform of the turn's streamed events (redact, rewrite, hold back).

    Fires once per turn, after ``before_turn``. A transform takes an async iterator of a step's
    model events (:mod:`think_core.events`) and returns one; it is applied to every step's
    stream, and the transforms of all plugins chain in hook order. What comes out is what
    everyone sees: ``on_chunk``, the clients, the stored answer, ``TurnResult``, ``StepResult``,
    the journal (so recovery and resumed streams match) and the model's later turns. It may
    hold text back (a match split across chunks) and must flush it when its input ends (the
    end of the step). Tool results are not in this stream (``transform_tool_result``).

    :param ctx: the turn's context, as ``before_turn``'s.
    :returns: the transform, or ``None``. With no implementation the stream is not re-iterated.

    Fails closed: if the hook or a transform raises, the turn fails with a
    :class:`~think_core.errors.PluginError` naming the plugin.

    **Think:** like the AI SDK's ``experimental_transform`` in Think's ``streamText``, as a hook,
    so the transforms of several plugins compose.
    """


@hookspec
def after_tool_call(ctx: ToolCallResultContext) -> None:
    """Observe the outcome of a tool call.

    Fires for every tool call, whatever the decision (executed, blocked, substituted, failed).

    :param ctx: the call's fields (``session``, ``request_id``, ``body``, ``step_number``,
        ``tool_call_id``, ``tool_name``, ``input`` — the model's original input — ``tool``,
        ``messages``) plus ``success``
        (``False`` only when execution or the decision hook raised, or the call was
        interrupted), ``output``, ``error``, ``duration_ms``, ``decision`` (``"allow"``,
        ``"block"`` or ``"substitute"``), ``decided_by`` (the plugin whose ``before_tool_call``
        decided; ``None`` when none did) and ``interrupted``.
    :returns: ignored.

    In a durable submission's turn resumed after a crash, a call whose result was stored
    before the crash is reused without firing this hook again. A call that had started without
    a stored result runs again (and fires as usual) only if its tool is idempotent or
    read-only; otherwise it is not run, and this hook fires once with ``interrupted=True``,
    ``success=False`` and the ``error`` the model gets (it may or may not have taken effect).

    Broadcast. If an implementation raises, the error is logged with the plugin's name and
    the other implementations and the turn carry on.

    **Think:** as ``afterToolCall`` (blocked and substituted calls included), plus
    ``decision``, ``decided_by`` and ``interrupted``, which Think does not have.
    """


@hookspec
def on_step_finish(ctx: StepResult) -> None:
    """Observe a finished model step.

    Fires after each step's stream ended and its tool calls ran.

    :param ctx: ``session``, ``request_id``, ``body``, ``step_number``, ``finish_reason``,
        ``text``, ``reasoning_text``, ``tool_calls``, ``tool_results`` (one
        :class:`~think_core.types.StepToolResult` per settled call: ``tool_call_id``,
        ``tool_name``, ``output``, ``error``), ``usage`` (input/output/total/reasoning/cached
        tokens), ``sources`` (what the answer cites, each once in order of first mention:
        :class:`~think_core.events.UrlSource` ``id``/``url``/``title``, from Anthropic web search
        citations, OpenAI ``url_citation`` annotations, Gemini grounding; or
        :class:`~think_core.events.DocumentSource` ``id``/``media_type``/``title``/``filename``,
        from citations of documents), ``files`` (what the model generated, e.g. an image:
        :class:`~think_core.events.GeneratedFile` ``media_type``, ``base64`` or ``url``, and
        ``data`` as bytes), ``model_id``, ``response_id``, ``warnings`` (what was dropped on the
        way, e.g. a setting the provider does not support), ``provider_metadata``, ``request`` (the
        provider request body as sent, never a credential; ``None`` for a model that is not an
        HTTP provider) and ``response`` (``id``, ``model``, ``headers``: request ids and
        rate-limit state).
    :returns: ignored.

    Broadcast. If an implementation raises, the error is logged with the plugin's name and
    the other implementations and the turn carry on.

    **Think:** ``onStepFinish`` (``onStepEnd`` since 0.15) gets the AI SDK ``StepResult``; the same
    fields here in snake_case: ``ctx.sources`` items have ``source_type`` (``"url"`` /
    ``"document"``), ``id``, ``url``, ``title``, ``media_type``, ``filename``,
    ``provider_metadata``; ``ctx.files`` items ``media_type``, ``base64`` and ``data`` (the AI
    SDK's ``uint8Array``). Differences: a source the model cites again is listed once (the AI
    SDK lists every citation; ``on_chunk`` sees each), and a source or file is also a part of
    the stored answer (``source-url``, ``source-document``, ``file``), which the AI SDK's
    ``toUIMessageStream`` sends only with ``sendSources``.
    """


@hookspec
def on_chat_response(result: ChatResponseResult) -> None:
    """Observe the end of a turn.

    Fires once per turn after the assistant message is persisted **and** the session's turn
    lock is released, so calling ``session.save_messages(...)`` from here chains a new turn.

    For a durable submission (``submit_messages``) the answer and the submission's completion
    are committed in one transaction *before* this hook runs. A process that dies after that
    commit — while this hook runs, or before it starts — does not run the turn again, so the
    hook does not run again either: for submissions it is **at most once** per turn (a crash in
    that window skips it), never a second answer. It also does not fire for a turn whose
    submission was retaken by another owner (that owner answers it).

    :param result: ``session``, ``request_id``, ``body``, ``message`` (the assistant UI
        message as stored, or ``None`` when the turn stored none — never an unsaved one; as
        a client is served it: without the reasoning a ``send_reasoning=False`` turn hid),
        ``status`` (``"completed"``, ``"error"``, ``"aborted"``), ``continuation``,
        ``continued_parts`` (a continuation extends the answer it continues: how many of
        ``message.parts`` it already had; ``added_parts`` are this turn's), ``error``,
        ``output`` (parsed structured output, when asked for), ``usage`` (turn total).
    :returns: ignored.

    Broadcast. If an implementation raises, the error is logged with the plugin's name and
    the other implementations and the turn carry on.

    **Think:** a nested ``chat()`` from this hook is not skipped but chains a new turn; a turn
    that stored nothing gets ``message=None``; it also fires for a turn ended by an overflow
    that recovery could not fix. ``session.chat(on_done=...)`` runs *after* this hook, where
    Think calls ``onDone`` first: the caller's callback ends its ``chat()`` call, so when it runs
    the turn is over for every plugin too (their response hooks done, the lock released) and an
    ``on_done`` that reads what plugins recorded, or starts the next turn, never races them.
    ``on_error`` runs after this hook in both.
    """


@hookspec(firstresult=True)
def on_chat_error(error: BaseException, ctx: ChatErrorContext) -> Any | None:
    """Replace or observe a terminal turn error.

    Fires once when a turn fails for good (after any recovery or retry), for errors raised
    before streaming and errors that arrive inside the model stream alike — and for a chat
    request whose body cannot be parsed (WebSocket frame or ``POST /api/chat``), with
    ``stage="parse"``, before any turn exists. The turn's partial answer (if any) is already
    stored, with the error as it stood, so the session read from here shows what the user saw;
    it is stored again with the text this hook settles on.

    :param error: the exception.
    :param ctx: ``session``, ``request_id``, ``body``, ``stage`` (``"parse"``, ``"persist"``,
        ``"turn"``, ``"stream"``), ``messages_persisted``, ``classification`` (what
        ``classify_chat_error`` said).
    :returns: a replacement (an exception, or a message string) reported instead of
        ``error``, or ``None`` to keep the original.

    firstresult. If an implementation raises, it is logged and the original error stands.

    **Think:** ``onChatError`` is sync and fires for some failures only (not for in-stream
    errors on most paths); this hook may be async and fires for every terminal failure, after
    classification, whose answer it receives. A ``POST /api/chat`` body that is not JSON, or
    names no session, fires nothing (there is no session to give the hook); the client gets
    its 400 as before.
    """


@hookspec(firstresult=True)
def classify_chat_error(error: BaseException, ctx: ChatErrorContext) -> str | None:
    """Classify a turn error so the engine can recover from it.

    Fires for every turn error (HTTP errors and in-stream error events) before the engine
    decides between recovery, retry and failure.

    :param error: the exception (often a :class:`~think_core.errors.ProviderError` with
        ``status``, ``code``, ``message``, ``headers``, ``body``).
    :param ctx: as for ``on_chat_error``.
    :returns: ``"context_overflow"`` (compact and retry when reactive recovery is on),
        ``"rate_limit"`` / ``"transient"`` (bounded retry when nothing was streamed in the failed
        step), ``"fatal"`` / ``"unknown"`` (fail now), or ``None`` for no opinion.

    firstresult. If an implementation raises, it is logged and treated as ``None``; so is an
    answer that is not one of the classes above.

    **Think:** ``classifyChatError`` is consulted only for in-stream errors with reactive
    overflow recovery on, and only ``"context_overflow"`` has an effect. Here classification
    runs for every error (parse-stage ones too), drives the step retry (``"rate_limit"``,
    ``"transient"``) and reaches ``on_chat_error``; the bundled overflow classifier plugin is
    on once installed (disable it like any entry-point plugin).
    """


@hookspec
def register_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add subcommands to the ``think`` command line.

    Fires when the command line builds its parser, once per ``think`` invocation that may need a
    plugin's command (always for ``think --help`` and for a command that is not built in; never
    inside a turn). The plugins asked are the entry-point plugins the environment allows
    (``THINK_PLUGINS``, ``THINK_DISABLE_PLUGINS``, think.toml's ``disable``); a disabled plugin
    adds no command.

    :param subparsers: the ``argparse`` sub-parsers of ``think``. Add a parser with
        ``subparsers.add_parser(name, help=...)`` and give it the function to run with
        ``parser.set_defaults(func=run)``; ``run(args)`` gets the parsed ``argparse.Namespace``
        and returns the exit code (``None`` means 0), or is an ``async def`` the command line
        runs in a fresh event loop.
    :returns: ignored.

    Broadcast, **sync only** (an ``async def`` implementation is refused at registration). If an
    implementation raises (a name already taken by another command, say), the error is logged
    with the plugin's name, that plugin's commands may be missing, and the command line carries
    on.
    """
