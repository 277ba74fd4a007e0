"""The async hook dispatcher.

pluggy is synchronous: called through ``pm.hook.x()``, an ``async def`` implementation
yields a coroutine object, which is never ``None`` — so a firstresult hook would stop at the
first async implementation even when it means "no opinion", and broadcast results would be
coroutines nobody awaits. :class:`HookDispatcher` therefore keeps pluggy's registry and ordering
(LIFO, ``tryfirst``/``trylast``, opt-in arguments) and replaces only the call loop: it calls
each implementation in pluggy's order, awaits awaitables, and only then looks at the result.

There is one call loop (:meth:`HookDispatcher._run`), told per hook by a :class:`_Policy`
whether the first result wins and what a failure means:

* decision hooks (``before_turn``, ``before_step``, ``before_tool_call``) and
  ``configure_session`` raise :class:`~think_core.errors.PluginError` naming the plugin, so the
  engine fails closed; a decision that is neither ``None``, its model nor a dict of the
  model's fields raises :class:`~think_core.errors.PluginResultError`;
* observers and the error hooks are isolated: a raising implementation is logged with the
  plugin's name and skipped; an unusable answer of an error hook counts as ``None``.

Only ``Exception`` is ever caught, so cancellation always propagates.

Time limits (:mod:`think_core.hooks.limits`): an awaited implementation that does not answer
within its plugin's limit is cancelled and fails with :class:`~think_core.errors.HookTimeout`
under the hook's policy. A plain ``def`` cannot be interrupted: it is timed when it returns,
a call past the limit counts as timed out (its answer is dropped), and one that held the event
loop longer than 100 ms is reported once per plugin and hook (:mod:`think_core.hooks.watchdog`).
``on_chunk`` implementations are timed the same way; one that ran past its limit is skipped
for the rest of that turn.

``THINK_TRACE_PLUGINS=1`` (read when the dispatcher is built) logs every implementation call
(:mod:`think_core.hooks.tracing`).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from ..errors import HookTimeout, PluginError, PluginResultError
from ..types import (
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    ErrorClassification,
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
from .limits import DEFAULT_HOOK_TIMEOUT, HookLimits
from .plugins import ThinkPluginManager
from .policies import BROADCAST, CLASSIFY, REPLACE_ERROR, SETUP, STEP_CONFIG, TOOL_DECISION, TURN_CONFIG, Policy
from .tracing import traced_call, tracing_enabled
from .watchdog import SLOW_SYNC_HOOK, BlockingWatch

__all__ = ["HookDispatcher", "tracing_enabled"]

logger = logging.getLogger("think.plugins")

ChunkObserver = Callable[[ChunkContext], object]
_Wrap = Callable[[str, str, Callable[..., Any]], Callable[..., Any]]


@dataclass(frozen=True, slots=True)
class _Impl:
    """One hook implementation, ready to call: ``argnames`` are the spec parameters it asked for."""

    plugin_name: str
    function: Callable[..., Any]
    argnames: tuple[str, ...]
    limit: float | None


async def _within(awaitable: Any, impl: _Impl, hook: str) -> Any:
    """Await ``awaitable`` under ``impl``'s limit (not ``None``); cancelled past it. Runs in the
    caller's task, so a hook sees (and may set) the turn's context variables."""
    limit = cast(float, impl.limit)
    try:
        async with asyncio.timeout(limit) as scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():  # ours, not a TimeoutError the hook raised itself
            raise HookTimeout(impl.plugin_name, hook, limit) from None
        raise


def _discard(result: Any) -> None:
    if inspect.iscoroutine(result):
        result.close()  # never awaited: close it, so no "never awaited" warning follows


# A turn whose on_chunk observer ran past its limit skips it from then on: (plugin, request id).
# Bounded, so a long-running process does not collect the ids of finished turns.
_MAX_MUTED_CHUNK_OBSERVERS = 1024


def _ignoring_ctx(function: Callable[[], object]) -> ChunkObserver:
    def observer(ctx: ChunkContext) -> object:
        return function()

    return observer


class HookDispatcher:
    """Calls the hooks of one plugin manager with async-correct semantics.

    Call plans are cached per hook and rebuilt when the manager's ``generation`` changes, so
    registering or unregistering a plugin later is picked up without a per-call rebuild.
    """

    def __init__(
        self,
        pm: ThinkPluginManager,
        *,
        hook_timeout: float | None = DEFAULT_HOOK_TIMEOUT,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self._pm = pm
        self._wrap: _Wrap | None = traced_call if tracing_enabled() else None
        self._limits = HookLimits(hook_timeout, settings)
        self._watch = BlockingWatch()
        self._generation = -1
        self._plans: dict[str, tuple[_Impl, ...]] = {}
        self._chunk_generation = -1
        self._chunk_plan: tuple[tuple[str, ChunkObserver, float | None], ...] = ()
        self._chunk_observers: tuple[ChunkObserver, ...] = ()
        self._muted_chunks: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Resolve every registered plugin's limit now, so a bad one fails when the agent is built.
        for name, plugin in pm.list_name_plugin():
            if plugin is not None:
                self._limits.for_plugin(plugin, name)

    # -- call plans and the call loop --------------------------------------------------------

    def _impls(self, hook: str) -> tuple[_Impl, ...]:
        if self._generation != self._pm.generation:
            self._plans.clear()
            self._generation = self._pm.generation
        plan = self._plans.get(hook)
        if plan is None:
            plan = self._plans[hook] = self._build_plan(hook)
        return plan

    def _build_plan(self, hook: str) -> tuple[_Impl, ...]:
        wrap = self._wrap
        # get_hookimpls() lists in reverse call order: pluggy calls the list back to front.
        return tuple(
            _Impl(
                impl.plugin_name,
                impl.function if wrap is None else wrap(hook, impl.plugin_name, impl.function),
                tuple(impl.argnames),
                self._limits.for_plugin(impl.plugin, impl.plugin_name),
            )
            for impl in reversed(getattr(self._pm.hook, hook).get_hookimpls())
        )

    async def _run(self, hook: str, kwargs: dict[str, Any], policy: Policy) -> Any:
        """Call ``hook``'s implementations in pluggy's order under ``policy``; returns the first
        accepted result of a firstresult hook, else ``None``."""
        result, _ = await self._run_named(hook, kwargs, policy)
        return result

    async def _run_named(self, hook: str, kwargs: dict[str, Any], policy: Policy) -> tuple[Any, str | None]:
        """:meth:`_run`, also naming the plugin whose result was accepted (``None`` for none)."""
        for impl in self._impls(hook):
            try:
                # Inline, not a shared helper (see _call_closed): one coroutine frame less per
                # implementation is ~25 % of a sync hook's dispatch (bench/hook_dispatch.py).
                # Await first, then test: a coroutine that returns None is no decision.
                started = time.perf_counter()
                result = impl.function(*[kwargs[name] for name in impl.argnames])
                blocked = time.perf_counter() - started
                if blocked > SLOW_SYNC_HOOK:
                    self._blocked(impl, hook, blocked, result)
                if result is not None and inspect.isawaitable(result):
                    result = await (result if impl.limit is None else _within(result, impl, hook))
            except HookTimeout as exc:
                if not policy.isolate:
                    raise
                logger.warning("%s; skipped", exc, extra={"plugin": impl.plugin_name, "hook": hook})
                continue
            except Exception as exc:
                if not policy.isolate:
                    raise PluginError(impl.plugin_name, hook, exc) from exc
                logger.exception("plugin %r failed in %s; ignored", impl.plugin_name, hook)
                continue
            if result is None or not policy.first:
                continue
            if policy.accept is None:
                return result, impl.plugin_name
            try:
                return policy.accept(result), impl.plugin_name
            except (TypeError, ValueError) as exc:
                if not policy.isolate:
                    raise PluginResultError(impl.plugin_name, hook, exc) from exc
                logger.warning(
                    "plugin %r returned an invalid value from %s: %r; ignored",
                    impl.plugin_name,
                    hook,
                    result,
                )
        return None, None

    async def _call_closed(self, impl: _Impl, hook: str, kwargs: dict[str, Any]) -> Any:
        """One implementation's answer for the transform hooks, which fail closed: any failure
        is a :class:`PluginError` naming the plugin (a ``HookTimeout`` already is one). The same
        steps as :meth:`_run_named`'s loop, which keeps them inline on the decision hooks' path."""
        try:
            started = time.perf_counter()
            result = impl.function(*[kwargs[name] for name in impl.argnames])
            blocked = time.perf_counter() - started
            if blocked > SLOW_SYNC_HOOK:
                self._blocked(impl, hook, blocked, result)
            if result is not None and inspect.isawaitable(result):
                result = await (result if impl.limit is None else _within(result, impl, hook))
        except PluginError:
            raise
        except Exception as exc:
            raise PluginError(impl.plugin_name, hook, exc) from exc
        return result

    def _blocked(self, impl: _Impl, hook: str, seconds: float, result: Any) -> None:
        """A sync call held the loop for ``seconds``: warn once; past the limit it timed out."""
        self._watch.blocked(impl.plugin_name, hook, seconds)
        if impl.limit is not None and seconds > impl.limit:
            _discard(result)
            raise HookTimeout(impl.plugin_name, hook, impl.limit)

    def implements(self, hook: str) -> bool:
        """Whether any plugin implements ``hook``. The turn builds a hook's context only then:
        a context nobody reads still costs a validated model and a copy of the history."""
        return bool(self._impls(hook))

    # -- the hooks ---------------------------------------------------------------------------

    async def configure_session(self, session: SessionView) -> None:
        """Broadcast; the first implementation that raises aborts opening the session."""
        await self._run("configure_session", {"session": session}, SETUP)

    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        """firstresult; exceptions propagate so the turn fails closed."""
        result: TurnConfig | None = await self._run("before_turn", {"ctx": ctx}, TURN_CONFIG)
        return result

    async def before_step(self, ctx: StepContext) -> StepConfig | None:
        """firstresult; exceptions propagate so the turn fails closed."""
        result: StepConfig | None = await self._run("before_step", {"ctx": ctx}, STEP_CONFIG)
        return result

    async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        """firstresult; exceptions propagate (the engine turns them into a failed call)."""
        decision, _ = await self.decide_tool_call(ctx)
        return decision

    async def decide_tool_call(self, ctx: ToolCallContext) -> tuple[ToolCallDecision | None, str | None]:
        """:meth:`before_tool_call`, also naming the plugin that decided (``None``: no decision)."""
        result: tuple[ToolCallDecision | None, str | None] = await self._run_named("before_tool_call", {"ctx": ctx}, TOOL_DECISION)
        return result

    async def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        """Broadcast; failures are logged and isolated."""
        await self._run("after_tool_call", {"ctx": ctx}, BROADCAST)

    @property
    def transforms_tool_results(self) -> bool:
        """Whether any plugin implements ``transform_tool_result`` (else outputs pass untouched)."""
        return bool(self._impls("transform_tool_result"))

    async def transform_tool_result(
        self, ctx: ToolCallResultContext, normalize: Callable[[Any], Any]
    ) -> tuple[Any, list[str]]:
        """The call's output as every ``transform_tool_result`` left it, in hook order, and the
        plugins that changed it: each implementation sees the output so far (``normalize``-d to
        JSON form); ``None`` keeps it. Fails closed with :class:`PluginError`."""
        output, changed_by = ctx.output, []
        for impl in self._impls("transform_tool_result"):
            result = await self._call_closed(impl, "transform_tool_result", {"ctx": ctx})
            if result is not None:
                rewritten = normalize(result)
                if rewritten != output:
                    changed_by.append(impl.plugin_name)
                output = rewritten
                ctx = ctx.model_copy(update={"output": output})
        return output, changed_by

    async def stream_transforms(self, ctx: TurnContext) -> tuple[tuple[str, StreamTransform], ...]:
        """The turn's stream transforms, named by plugin, in hook order (empty, at no cost, when
        no plugin implements ``transform_stream``). Fails closed with :class:`PluginError`."""
        transforms: list[tuple[str, StreamTransform]] = []
        for impl in self._impls("transform_stream"):
            result = await self._call_closed(impl, "transform_stream", {"ctx": ctx})
            if result is None:
                continue
            if not callable(result):
                raise PluginResultError(
                    impl.plugin_name, "transform_stream",
                    TypeError(f"got {type(result).__name__}; expected a callable taking and returning an async iterator"),
                )
            transforms.append((impl.plugin_name, result))
        return tuple(transforms)

    async def on_step_finish(self, ctx: StepResult) -> None:
        """Broadcast; failures are logged and isolated."""
        await self._run("on_step_finish", {"ctx": ctx}, BROADCAST)

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        """Broadcast; failures are logged and isolated."""
        await self._run("on_chat_response", {"result": result}, BROADCAST)

    async def on_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> Any | None:
        """firstresult replacement of a terminal error; a raising implementation is skipped."""
        return await self._run("on_chat_error", {"error": error, "ctx": ctx}, REPLACE_ERROR)

    async def classify_chat_error(
        self, error: BaseException, ctx: ChatErrorContext
    ) -> ErrorClassification | None:
        """firstresult classification; raising or unknown answers count as no opinion."""
        result: ErrorClassification | None = await self._run("classify_chat_error", {"error": error, "ctx": ctx}, CLASSIFY)
        return result

    # -- register_commands: a registration hook, called outside any turn ---------------------

    def register_commands(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Let every plugin add its ``think`` subcommands, in pluggy's order.

        Synchronous, unlike the turn hooks: the CLI builds its parser before any event loop
        runs, and the hook is sync-only. A raising implementation is logged with the plugin's
        name and skipped, so one broken plugin cannot take the whole command line down.
        """
        kwargs = {"subparsers": subparsers}
        for impl in self._impls("register_commands"):
            try:
                impl.function(*[kwargs[name] for name in impl.argnames])
            except Exception:
                logger.exception(
                    "plugin %r failed in register_commands; its commands are missing", impl.plugin_name
                )

    # -- on_chunk: the hot path --------------------------------------------------------------

    def _refresh_chunk_plan(self) -> None:
        plan = []
        for impl in self._impls("on_chunk"):
            # The spec has exactly one parameter, ``ctx``: an implementation either takes it or
            # takes nothing. Taking it, the implementation itself is the observer (no wrapper).
            observer = impl.function if impl.argnames else _ignoring_ctx(impl.function)
            plan.append((impl.plugin_name, observer, impl.limit))
        self._chunk_plan = tuple(plan)
        self._chunk_observers = tuple(observer for _, observer, _ in plan)
        self._chunk_generation = self._pm.generation

    @property
    def plugins(self) -> dict[str, object]:
        """The registered plugin objects by name, in registration order (what a sub-agent
        called as a tool loads too, so delegating keeps the caller's guards)."""
        return {name: plugin for name, plugin in self._pm.list_name_plugin() if plugin is not None}

    @property
    def chunk_observers(self) -> tuple[ChunkObserver, ...]:
        """The ``on_chunk`` implementations as plain callables taking the ``ChunkContext``,
        in pluggy's order. Empty when no plugin observes chunks, so the engine can skip
        building a ``ChunkContext`` at all."""
        if self._chunk_generation != self._pm.generation:
            self._refresh_chunk_plan()
        return self._chunk_observers

    def emit_chunk(self, ctx: ChunkContext) -> None:
        """Hand one streamed event to every ``on_chunk`` observer; failures are logged, isolated.
        An observer that ran past its limit is skipped for the rest of the turn."""
        if self._chunk_generation != self._pm.generation:
            self._refresh_chunk_plan()
        muted = self._muted_chunks
        # One clock reading per observer: each one's time is the gap since the previous reading.
        started = time.perf_counter()
        for plugin, observer, limit in self._chunk_plan:
            if muted and (plugin, ctx.request_id) in muted:
                continue
            try:
                observer(ctx)
            except Exception:
                logger.exception("plugin %r failed in on_chunk; ignored", plugin)
            now = time.perf_counter()
            if now - started > SLOW_SYNC_HOOK:
                self._chunk_blocked(plugin, limit, now - started, ctx.request_id)
            started = now

    def _chunk_blocked(self, plugin: str, limit: float | None, seconds: float, request_id: str) -> None:
        self._watch.blocked(plugin, "on_chunk", seconds)
        if limit is None or seconds <= limit:
            return
        logger.warning(
            "%s; skipped for the rest of turn %s",
            HookTimeout(plugin, "on_chunk", limit),
            request_id,
            extra={"plugin": plugin, "hook": "on_chunk"},
        )
        muted = self._muted_chunks
        muted[(plugin, request_id)] = None
        while len(muted) > _MAX_MUTED_CHUNK_OBSERVERS:
            muted.popitem(last=False)
