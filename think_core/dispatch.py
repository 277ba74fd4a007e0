"""The async hook dispatcher.

pluggy is synchronous: called through ``pm.hook.x()``, an ``async def`` implementation
yields a coroutine object, which is never ``None`` — so a firstresult hook would stop at the
first async implementation even when it means "no opinion", and broadcast results would be
coroutines nobody awaits. :class:`HookRelay` therefore keeps pluggy's registry and ordering
(LIFO, ``tryfirst``/``trylast``, opt-in arguments) and replaces only the call loop: it calls
each implementation in pluggy's order, awaits awaitables, and only then looks at the result.

Failure policy (DESIGN §2): decision hooks propagate (the engine fails closed), observers are
isolated and logged with the plugin's name, ``configure_session`` raises
:class:`~think_core.errors.PluginError`. Only ``Exception`` is ever caught, so cancellation
always propagates.

``THINK_TRACE_PLUGINS=1`` (read when the relay is built) logs every implementation call —
hook, plugin, result kind, duration including the await — at INFO on ``think.plugins.trace``.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import PluginError
from .plugins import ThinkPluginManager
from .types import (
    ERROR_CLASSIFICATIONS,
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

__all__ = ["HookRelay"]

logger = logging.getLogger("think.plugins")
trace_logger = logging.getLogger("think.plugins.trace")

_Config = TypeVar("_Config", bound=BaseModel)
ChunkObserver = Callable[[ChunkContext], object]


@dataclass(frozen=True, slots=True)
class _Impl:
    """One hook implementation, ready to call: ``argnames`` are the spec parameters it asked for."""

    plugin_name: str
    function: Callable[..., Any]
    argnames: tuple[str, ...]


def _tracing_enabled() -> bool:
    return os.environ.get("THINK_TRACE_PLUGINS", "").strip().lower() in {"1", "true", "yes", "on"}


def _result_kind(result: object) -> str:
    return "None" if result is None else type(result).__name__


def _trace(hook: str, plugin: str, result: str, started: float) -> None:
    duration_ms = (time.perf_counter() - started) * 1000.0
    trace_logger.info(
        "%s plugin=%s result=%s duration_ms=%.3f",
        hook,
        plugin,
        result,
        duration_ms,
        extra={"hook": hook, "plugin": plugin, "result": result, "duration_ms": duration_ms},
    )


class HookRelay:
    """Calls the hooks of one plugin manager with async-correct semantics.

    Call lists are cached per hook and rebuilt when the manager's ``generation`` changes, so
    registering or unregistering a plugin later is picked up without a per-call rebuild.
    """

    def __init__(self, pm: ThinkPluginManager) -> None:
        self._pm = pm
        self._trace = _tracing_enabled()
        self._generation = -1
        self._plans: dict[str, tuple[_Impl, ...]] = {}
        self._chunk_generation = -1
        self._chunk_plan: tuple[tuple[str, ChunkObserver], ...] = ()
        self._chunk_observers: tuple[ChunkObserver, ...] = ()

    # -- call plans -------------------------------------------------------------------------

    def _impls(self, hook: str) -> tuple[_Impl, ...]:
        if self._generation != self._pm.generation:
            self._plans.clear()
            self._generation = self._pm.generation
        plan = self._plans.get(hook)
        if plan is None:
            caller = getattr(self._pm.hook, hook)
            # get_hookimpls() lists in reverse call order: pluggy calls the list back to front.
            plan = tuple(
                _Impl(impl.plugin_name, impl.function, tuple(impl.argnames))
                for impl in reversed(caller.get_hookimpls())
            )
            self._plans[hook] = plan
        return plan

    def _call(self, hook: str, impl: _Impl, kwargs: dict[str, Any]) -> Any:
        """Call one implementation; returns its result or an awaitable of it. No coroutine is
        created for a plain ``def`` implementation, which keeps sync plugins cheap."""
        if self._trace:
            return self._traced(hook, impl, kwargs)
        return impl.function(*[kwargs[name] for name in impl.argnames])

    async def _traced(self, hook: str, impl: _Impl, kwargs: dict[str, Any]) -> Any:
        started = time.perf_counter()
        try:
            result = impl.function(*[kwargs[name] for name in impl.argnames])
            if inspect.isawaitable(result):
                result = await result
        except BaseException as exc:  # traced, then re-raised untouched
            _trace(hook, impl.plugin_name, f"raised {type(exc).__name__}", started)
            raise
        _trace(hook, impl.plugin_name, _result_kind(result), started)
        return result

    async def _first(self, hook: str, kwargs: dict[str, Any]) -> tuple[_Impl, Any] | None:
        """The first implementation whose *awaited* result is not ``None``, and that result."""
        for impl in self._impls(hook):
            try:
                result = self._call(hook, impl, kwargs)
                # Await first, then test: a coroutine that returns None is no decision.
                if result is not None and inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                # Propagates (decision hooks fail closed), naming the plugin that failed.
                raise PluginError(impl.plugin_name, hook, exc) from exc
            if result is not None:
                return impl, result
        return None

    async def _first_isolated(
        self, hook: str, kwargs: dict[str, Any], valid: Callable[[Any], bool] = lambda _: True
    ) -> Any | None:
        """Like :meth:`_first`, but a raising or invalid implementation counts as ``None``."""
        for impl in self._impls(hook):
            try:
                result = self._call(hook, impl, kwargs)
                if result is not None and inspect.isawaitable(result):
                    result = await result
            except Exception:
                logger.exception("plugin %r failed in %s; ignored", impl.plugin_name, hook)
                continue
            if result is None:
                continue
            if valid(result):
                return result
            logger.warning(
                "plugin %r returned an invalid value from %s: %r; ignored",
                impl.plugin_name,
                hook,
                result,
            )
        return None

    async def _broadcast_isolated(self, hook: str, kwargs: dict[str, Any]) -> None:
        for impl in self._impls(hook):
            try:
                result = self._call(hook, impl, kwargs)
                if result is not None and inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("plugin %r failed in %s; ignored", impl.plugin_name, hook)

    @staticmethod
    def _coerce(hook: str, impl: _Impl, result: Any, model: type[_Config]) -> _Config:
        if isinstance(result, model):
            return result
        if isinstance(result, dict):
            try:
                return model.model_validate(result)
            except ValidationError as exc:
                raise TypeError(
                    f"plugin {impl.plugin_name!r} returned an invalid {model.__name__} "
                    f"from {hook}: {exc}"
                ) from exc
        raise TypeError(
            f"plugin {impl.plugin_name!r} returned {type(result).__name__} from {hook}; "
            f"expected {model.__name__}, a dict of its fields, or None"
        )

    async def _decide(self, hook: str, ctx: Any, model: type[_Config]) -> _Config | None:
        found = await self._first(hook, {"ctx": ctx})
        if found is None:
            return None
        impl, result = found
        return self._coerce(hook, impl, result, model)

    # -- the hooks ---------------------------------------------------------------------------

    async def configure_session(self, session: Any) -> None:
        """Broadcast; the first implementation that raises aborts opening the session."""
        for impl in self._impls("configure_session"):
            try:
                result = self._call("configure_session", impl, {"session": session})
                if result is not None and inspect.isawaitable(result):
                    await result
            except Exception as exc:
                raise PluginError(impl.plugin_name, "configure_session", exc) from exc

    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        """firstresult; exceptions propagate so the turn fails closed."""
        return await self._decide("before_turn", ctx, TurnConfig)

    async def before_step(self, ctx: StepContext) -> StepConfig | None:
        """firstresult; exceptions propagate so the turn fails closed."""
        return await self._decide("before_step", ctx, StepConfig)

    async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        """firstresult; exceptions propagate (the engine turns them into a failed call)."""
        return await self._decide("before_tool_call", ctx, ToolCallDecision)

    async def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        """Broadcast; failures are logged and isolated."""
        await self._broadcast_isolated("after_tool_call", {"ctx": ctx})

    async def on_step_finish(self, ctx: StepResult) -> None:
        """Broadcast; failures are logged and isolated."""
        await self._broadcast_isolated("on_step_finish", {"ctx": ctx})

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        """Broadcast; failures are logged and isolated."""
        await self._broadcast_isolated("on_chat_response", {"result": result})

    async def on_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> Any | None:
        """firstresult replacement of a terminal error; a raising implementation is skipped."""
        return await self._first_isolated("on_chat_error", {"error": error, "ctx": ctx})

    async def classify_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> str | None:
        """firstresult classification; raising or unknown answers count as no opinion."""
        return await self._first_isolated(
            "classify_chat_error",
            {"error": error, "ctx": ctx},
            valid=lambda value: value in ERROR_CLASSIFICATIONS,
        )

    # -- on_chunk: the hot path --------------------------------------------------------------

    def _refresh_chunk_plan(self) -> None:
        plan = []
        for impl in self._impls("on_chunk"):
            observer: ChunkObserver
            if impl.argnames:  # the spec has exactly one parameter, ``ctx``
                observer = impl.function
            else:
                observer = lambda ctx, function=impl.function: function()  # noqa: E731
            if self._trace:
                observer = self._traced_observer(impl.plugin_name, observer)
            plan.append((impl.plugin_name, observer))
        self._chunk_plan = tuple(plan)
        self._chunk_observers = tuple(observer for _, observer in plan)
        self._chunk_generation = self._pm.generation

    @staticmethod
    def _traced_observer(plugin: str, observer: ChunkObserver) -> ChunkObserver:
        def traced(ctx: ChunkContext) -> object:
            started = time.perf_counter()
            try:
                result = observer(ctx)
            except BaseException as exc:  # traced, then re-raised untouched
                _trace("on_chunk", plugin, f"raised {type(exc).__name__}", started)
                raise
            _trace("on_chunk", plugin, _result_kind(result), started)
            return result

        return traced

    @property
    def chunk_observers(self) -> tuple[ChunkObserver, ...]:
        """The ``on_chunk`` implementations as plain callables taking the ``ChunkContext``,
        in pluggy's order. Empty when no plugin observes chunks, so the engine can skip
        building a ``ChunkContext`` at all."""
        if self._chunk_generation != self._pm.generation:
            self._refresh_chunk_plan()
        return self._chunk_observers

    def emit_chunk(self, ctx: ChunkContext) -> None:
        """Hand one streamed event to every ``on_chunk`` observer; failures are logged, isolated."""
        if self._chunk_generation != self._pm.generation:
            self._refresh_chunk_plan()
        for plugin, observer in self._chunk_plan:
            try:
                observer(ctx)
            except Exception:
                logger.exception("plugin %r failed in on_chunk; ignored", plugin)
