"""What does the async-correct dispatcher cost per hook call?

For each hook kind — a firstresult decision hook (``before_tool_call``; every plugin answers
``None``, so all are called), a broadcast observer (``after_tool_call``) and the ``on_chunk``
hot path (``HookDispatcher.emit_chunk``) — with 0, 1, 4 and 16 plugins whose implementations are
``def`` or ``async def`` (``on_chunk`` is sync-only by contract), this prints µs per call of:

  relay   think_core.hooks.dispatch.HookDispatcher over think_core.hooks.plugins.build_plugin_manager
  plain   a hand-written Python loop over the same bound methods (await each result when the
          implementations are async; stop at the first non-None for firstresult) — the floor
  pluggy  pluggy's own ``pm.hook.<name>(ctx=...)`` (sync implementations only: pluggy cannot
          await, which is why the relay exists)

Every number is the best of several timed batches (timeit-style), measured in one event loop.

    python bench/hook_dispatch.py [--repeat 25] [--target 0.01]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _common import machine, table

from think_core import hookimpl
from think_core.events import TextDelta
from think_core.hooks.dispatch import HookDispatcher
from think_core.hooks.plugins import build_plugin_manager
from think_core.types import ChunkContext, ToolCallContext, ToolCallResultContext

COUNTS = (0, 1, 4, 16)


class SyncPlugin:
    @hookimpl
    def before_tool_call(self, ctx: Any) -> None:
        return None

    @hookimpl
    def after_tool_call(self, ctx: Any) -> None:
        return None

    @hookimpl
    def on_chunk(self, ctx: Any) -> None:
        return None


class AsyncPlugin:
    @hookimpl
    async def before_tool_call(self, ctx: Any) -> None:
        return None

    @hookimpl
    async def after_tool_call(self, ctx: Any) -> None:
        return None

    @hookimpl
    def on_chunk(self, ctx: Any) -> None:  # on_chunk must be sync
        return None


class _Session:
    id = "bench"


CALL_CTX = ToolCallContext.model_construct(
    session=_Session(), request_id="r", step_number=0, tool_call_id="c", tool_name="t",
    input={}, tool=None, messages=[],
)
RESULT_CTX = ToolCallResultContext.model_construct(
    session=_Session(), request_id="r", step_number=0, tool_call_id="c", tool_name="t", input={},
    tool=None, messages=[], success=True, output="ok", error=None, duration_ms=1.0, decision="allow",
)
CHUNK_CTX = ChunkContext(_Session(), "r", 0, TextDelta("x"))


async def best_per_call(body: Callable[[int], Awaitable[None]], repeat: int, target: float) -> float:
    """µs per call: calibrate a batch size that takes about ``target`` seconds, then take the
    best of ``repeat`` batches."""
    number = 1
    while True:
        started = time.perf_counter()
        await body(number)
        if time.perf_counter() - started >= target / 4 or number >= 1 << 22:
            break
        number *= 4
    number = max(1, int(number * target / max(time.perf_counter() - started, 1e-9)))
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        await body(number)
        best = min(best, time.perf_counter() - started)
    return best / number * 1e6


Loop = Callable[[int], Awaitable[None]]


def _relay_loops(relay: HookDispatcher) -> dict[str, Loop]:
    async def first(n: int) -> None:
        for _ in range(n):
            await relay.before_tool_call(CALL_CTX)

    async def broadcast(n: int) -> None:
        for _ in range(n):
            await relay.after_tool_call(RESULT_CTX)

    async def chunk(n: int) -> None:
        emit = relay.emit_chunk
        for _ in range(n):
            emit(CHUNK_CTX)

    return {"first": first, "broadcast": broadcast, "chunk": chunk}


def _plain_loops(plugins: list[Any], is_async: bool) -> dict[str, Loop]:
    # pluggy calls the last registered first; the plain loop uses the same order.
    decide = [p.before_tool_call for p in reversed(plugins)]
    observe = [p.after_tool_call for p in reversed(plugins)]
    on_chunk = [p.on_chunk for p in reversed(plugins)]

    async def chunk(n: int) -> None:
        for _ in range(n):
            for fn in on_chunk:
                fn(CHUNK_CTX)

    calls = _plain_async(decide, observe) if is_async else _plain_sync(decide, observe)
    return {**calls, "chunk": chunk}


def _plain_async(decide: list[Any], observe: list[Any]) -> dict[str, Loop]:
    async def first(n: int) -> None:
        for _ in range(n):
            for fn in decide:
                if await fn(CALL_CTX) is not None:
                    break

    async def broadcast(n: int) -> None:
        for _ in range(n):
            for fn in observe:
                await fn(RESULT_CTX)

    return {"first": first, "broadcast": broadcast}


def _plain_sync(decide: list[Any], observe: list[Any]) -> dict[str, Loop]:
    async def first(n: int) -> None:
        for _ in range(n):
            for fn in decide:
                if fn(CALL_CTX) is not None:
                    break

    async def broadcast(n: int) -> None:
        for _ in range(n):
            for fn in observe:
                fn(RESULT_CTX)

    return {"first": first, "broadcast": broadcast}


def _pluggy_loops(pm: Any) -> dict[str, Loop]:
    async def first(n: int) -> None:
        hook = pm.hook.before_tool_call
        for _ in range(n):
            hook(ctx=CALL_CTX)

    async def broadcast(n: int) -> None:
        hook = pm.hook.after_tool_call
        for _ in range(n):
            hook(ctx=RESULT_CTX)

    async def chunk(n: int) -> None:
        hook = pm.hook.on_chunk
        for _ in range(n):
            hook(ctx=CHUNK_CTX)

    return {"first": first, "broadcast": broadcast, "chunk": chunk}


def bodies(count: int, is_async: bool) -> dict[str, dict[str, Loop]]:
    """For each hook kind, the loops to time: relay, plain and (sync only) pluggy."""
    cls = AsyncPlugin if is_async else SyncPlugin
    plugins = [cls() for _ in range(count)]
    pm = build_plugin_manager(load_entrypoints=False, plugins=[], settings={})
    for i, plugin in enumerate(plugins):
        pm.register(plugin, name=f"p{i}")
    loops = {
        "relay": _relay_loops(HookDispatcher(pm)),
        "plain": _plain_loops(plugins, is_async),
        "pluggy": _pluggy_loops(pm),
    }
    kinds = {
        "firstresult (before_tool_call)": "first",
        "broadcast (after_tool_call)": "broadcast",
        "on_chunk (emit_chunk)": "chunk",
    }
    out = {label: {name: loops[name][key] for name in loops} for label, key in kinds.items()}
    if is_async:
        for kind in ("firstresult (before_tool_call)", "broadcast (after_tool_call)"):
            del out[kind]["pluggy"]  # pluggy would return un-awaited coroutines
    return out


async def measure(repeat: int, target: float) -> list[list[object]]:
    rows: list[list[object]] = []
    for kind in bodies(0, False):
        for is_async in (False, True):
            if is_async and kind.startswith("on_chunk"):
                continue  # async on_chunk is rejected at registration
            for count in COUNTS:
                loops = bodies(count, is_async)[kind]
                relay = await best_per_call(loops["relay"], repeat, target)
                plain = await best_per_call(loops["plain"], repeat, target)
                pluggy = await best_per_call(loops["pluggy"], repeat, target) if "pluggy" in loops else None
                rows.append([
                    kind, "async" if is_async else "sync", count, relay, plain,
                    "-" if pluggy is None else pluggy, relay - plain,
                    "-" if count == 0 else (relay - plain) / count,
                ])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=25, help="timed batches per cell (best is kept)")
    parser.add_argument("--target", type=float, default=0.01, help="seconds per batch")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = asyncio.run(measure(args.repeat, args.target))
    print(f"hook_dispatch — {machine()}")
    print(table(["hook kind", "impls", "plugins", "relay µs", "plain loop µs", "pluggy µs",
                 "relay − plain µs", "per plugin µs"], rows))
    print(f"(µs per hook call, best of {args.repeat} batches; total {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
