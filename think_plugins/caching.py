"""Cache the results of tools that do not change anything.

Registered under the entry point ``tool_cache``. A model often asks for the same lookup twice
in a conversation (or across conversations); answering the repeat from a cache saves the tool's
latency and cost without the model noticing.

What is cached
    Calls of tools annotated ``read_only`` or ``idempotent``, and of tools named in ``allow``.
    The key is the tool name plus the canonical JSON of the validated input (sorted keys,
    compact separators), plus the session id when ``scope = "session"``. Only successful real
    executions are stored (``decision == "allow"`` and ``success``), never blocked, substituted
    or failed calls, and only outputs that serialise to strict JSON.

How a hit is served
    ``before_tool_call`` returns ``substitute(output)``. It runs ``trylast``: every plugin not
    itself ``trylast`` — the read-only guard first of all (``tryfirst``) — decides before the
    cache, so a cached answer can never bypass a guard. If such a plugin decides (``allow()``,
    ``block()``, ``substitute()``), the cache is not consulted for that call and does not
    store its result: it stores only results of calls whose key it computed itself, so input
    rewritten by another plugin is not stored under the model's input. (The exception is a
    ``trylast`` plugin registered after this one: pluggy calls it after the cache. Its block or
    substitute is never stored, but a plugin that *rewrites input* must not be ``trylast``.)

Invalidation
    A call of any other tool (neither read-only, idempotent nor allow-listed: it may mutate)
    that was allowed to run empties the cache — the whole cache with ``scope = "global"``,
    that session's entries with ``scope = "session"``. It happens after the call finished, even
    when it failed (a failed mutation may have half-happened). Every invalidation bumps a
    generation counter; a result is stored only if no invalidation happened while its tool was
    running, so a lookup that raced with a mutation cannot store a stale answer.

Bounds
    ``ttl_seconds`` (``None``: no expiry) and ``max_entries`` with least-recently-used eviction.

Backends
    ``memory`` (per agent, per process) or ``sqlite`` (``path``): a file shared by every agent and
    process that points at it (WAL journal, ``busy_timeout``; each operation opens and closes
    its own connection, in a worker thread so a busy database never stalls the event loop).

Counters: ``plugin.stats`` (``hits``, ``misses``, ``stores``, ``invalidations``, ``evictions``,
``expirations``), for this plugin instance.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import to_jsonable_python

from think_core import (
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    hookimpl,
    substitute,
)

from ._cache_backends import GLOBAL_SCOPE, Backend, Lookup, MemoryBackend, SQLiteBackend

__all__ = [
    "CacheStats",
    "Lookup",
    "MemoryBackend",
    "SQLiteBackend",
    "ToolCache",
    "ToolCacheSettings",
    "cache_key",
]

_MAX_PENDING = 4096  # calls between before_ and after_tool_call, per session (a leak bound)


class ToolCacheSettings(BaseModel):
    """Settings of ``tool_cache``. The defaults give a small in-memory cache with a 5-minute TTL."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["memory", "sqlite"] = "memory"
    path: str | None = None
    """SQLite file (required for ``backend = "sqlite"``)."""
    ttl_seconds: float | None = Field(default=300.0, gt=0)
    """Seconds an entry stays valid; ``None`` keeps entries until evicted or invalidated."""
    max_entries: int = Field(default=1024, gt=0)
    allow: list[str] = []
    """Tool names cached although not annotated ``read_only`` or ``idempotent``."""
    scope: Literal["global", "session"] = "global"
    """``session``: entries (and invalidations) are per session id."""
    busy_timeout_ms: int = Field(default=5000, ge=0)

    @model_validator(mode="after")
    def _sqlite_needs_path(self) -> ToolCacheSettings:
        if self.backend == "sqlite" and not self.path:
            raise ValueError('backend "sqlite" needs a "path"')
        return self


@dataclass
class CacheStats:
    """Counters of one plugin instance (not shared through a SQLite file)."""

    hits: int = 0
    misses: int = 0
    stores: int = 0
    invalidations: int = 0
    evictions: int = 0
    expirations: int = 0


def canonical_json(value: Any) -> str:
    """Sorted keys, compact separators, strict JSON (no NaN): equal inputs give equal text."""
    return json.dumps(
        to_jsonable_python(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
        allow_nan=False,
    )


def cache_key(tool_name: str, input: Mapping[str, Any]) -> str:
    """The cache key of a call: tool name and canonical input (the scope is kept apart)."""
    return f"{tool_name}\n{canonical_json(dict(input))}"


@dataclass(frozen=True)
class _Pending:
    """What ``before_tool_call`` learnt on a miss, for ``after_tool_call`` to store under."""

    scope: str
    key: str
    generation: int


class ToolCache:
    """Serves repeated calls of non-mutating tools from a cache (see the module docstring).

    :param settings: :class:`ToolCacheSettings` or a dict of its fields. Settings given here win:
        the instance then ignores ``Think(settings={"tool_cache": ...})``. Built without them
        (as the entry-point loader does), it is configured from that section.
    :param clock: wall-clock seconds (``time.time``); injectable so TTL tests need no sleeping.
    """

    name = "tool_cache"
    #: read by the plugin loader: ``Think(settings={name: {...}})`` is validated with it
    settings_model: type[ToolCacheSettings] = ToolCacheSettings

    def __init__(
        self,
        settings: ToolCacheSettings | Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.stats = CacheStats()
        self.settings = (
            settings
            if isinstance(settings, ToolCacheSettings)
            else ToolCacheSettings.model_validate(settings or {})
        )

    @property
    def settings(self) -> ToolCacheSettings:
        return self._settings

    @settings.setter
    def settings(self, value: ToolCacheSettings) -> None:
        """Assigning settings (as the entry-point loader does) rebuilds the backend."""
        self._settings = value
        self.backend: Backend = (
            SQLiteBackend(value.path, value.max_entries, value.busy_timeout_ms)  # type: ignore[arg-type]
            if value.backend == "sqlite"
            else MemoryBackend(value.max_entries)
        )

    # -- policy -------------------------------------------------------------------------------
    def is_cacheable(self, tool_name: str, tool: Any) -> bool:
        """Read-only, idempotent or allow-listed: running it twice gives nothing new."""
        if tool_name in self.settings.allow:
            return True
        annotations = getattr(tool, "annotations", None)
        return bool(
            getattr(annotations, "read_only", False) or getattr(annotations, "idempotent", False)
        )

    def _scope(self, session: Any) -> str:
        return str(session.id) if self.settings.scope == "session" else GLOBAL_SCOPE

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a backend operation; SQLite goes to a worker thread (it may wait on a lock)."""
        if isinstance(self.backend, SQLiteBackend):
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    def _pending(self, ctx: Any) -> OrderedDict[str, _Pending]:
        state = ctx.session.state_for(self)
        return state.setdefault("pending", OrderedDict())

    # -- hooks --------------------------------------------------------------------------------
    @hookimpl(trylast=True)
    async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        """Answer from the cache on a hit; on a miss remember the key for ``after_tool_call``."""
        if not self.is_cacheable(ctx.tool_name, ctx.tool):
            return None
        try:
            key = cache_key(ctx.tool_name, ctx.input)
        except (TypeError, ValueError):
            return None  # input without a canonical JSON form: never cached
        scope = self._scope(ctx.session)
        lookup: Lookup = await self._run(self.backend.get, scope, key, self.clock())
        if lookup.expired:
            self.stats.expirations += 1
        if lookup.found:
            self.stats.hits += 1
            return substitute(lookup.value)
        self.stats.misses += 1
        pending = self._pending(ctx)
        pending[ctx.tool_call_id] = _Pending(scope, key, lookup.generation)
        while len(pending) > _MAX_PENDING:
            pending.popitem(last=False)
        return None

    @hookimpl
    async def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        """Store a real successful execution of a call we missed; invalidate after a mutation."""
        seen = self._pending(ctx).pop(ctx.tool_call_id, None)
        if ctx.decision != "allow" or ctx.tool is None:
            return  # blocked or substituted: nothing ran (nothing to store, nothing mutated)
        annotations = getattr(ctx.tool, "annotations", None)
        if not (getattr(annotations, "read_only", False) or ctx.tool_name in self.settings.allow):
            # It may have changed something — idempotent tools included (set(6) after set(5)
            # changes what set(5) and every read would return): drop what the cache knows.
            scope = None if self.settings.scope == "global" else self._scope(ctx.session)
            await self._run(self.backend.invalidate, scope)
            self.stats.invalidations += 1
            if seen is None or not ctx.success or not getattr(annotations, "idempotent", False):
                return
            # Repeating this same idempotent call right away may be answered from the cache.
            fresh = await self._run(self.backend.get, seen.scope, seen.key, self.clock())
            seen = replace(seen, generation=fresh.generation)
        elif seen is None or not ctx.success:
            return
        try:
            value_json = json.dumps(ctx.output, allow_nan=False)
        except (TypeError, ValueError):
            return
        ttl = self.settings.ttl_seconds
        expires_at = None if ttl is None else self.clock() + ttl
        stored, evicted = await self._run(
            self.backend.put, seen.scope, seen.key, value_json, expires_at, seen.generation
        )
        if stored:
            self.stats.stores += 1
        self.stats.evictions += evicted
