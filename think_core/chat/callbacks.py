"""``session.chat()`` with the callbacks of Think's sub-agent ``chat()``: ``on_start``,
``on_event``, ``on_done``, ``on_error``, each a plain or an async function.

``on_start(request_id)`` runs before the turn; ``on_event(chunk)`` gets every UI message stream
chunk in order (an async one is awaited off the hot path, in a task of its own, so a slow
consumer never holds up the model stream); ``on_done(result)`` runs when the turn completed;
``on_error(error)`` runs when it failed — with the error text (``result.error``) of a failed
turn, or with the exception the call would have raised, which it then does not raise: the
call returns a result with status ``error``. An aborted or skipped turn calls neither.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..turn.request import TurnRequest
from ..types import TurnResult

__all__ = ["ChatCallbacks", "check_sync_callback", "run_with_callbacks"]

Callback = Callable[..., Any]


def _is_async(function: Any) -> bool:
    if function is None:
        return False
    # A callable object whose __call__ is a coroutine function is async just the same.
    call_method = type(function).__call__ if not inspect.isfunction(function) else None
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call_method)


def check_sync_callback(on_event: Any) -> None:
    """``on_event`` of the entry paths without callbacks runs on the hot path, synchronously,
    per chunk: a coroutine function would never be awaited."""
    if on_event is not None and _is_async(on_event):
        raise TypeError("on_event must be a plain function here (session.chat() and session.stream() take async ones)")


@dataclass
class ChatCallbacks:
    on_start: Callback | None = None
    on_event: Callback | None = None
    on_done: Callback | None = None
    on_error: Callback | None = None

    def plain(self) -> bool:
        """Only a plain ``on_event`` (or nothing): the turn can call it directly."""
        return (self.on_start, self.on_done, self.on_error) == (None, None, None) and not _is_async(self.on_event)


async def _call(function: Callback | None, *args: Any) -> None:
    if function is not None:
        result = function(*args)
        if inspect.isawaitable(result):
            await result


async def _forward(queue: asyncio.Queue[Any], on_event: Callback) -> None:
    while (chunk := await queue.get()) is not None:
        await _call(on_event, chunk)


async def run_with_callbacks(
    run: Callable[[TurnRequest], Awaitable[TurnResult]], request: TurnRequest, callbacks: ChatCallbacks
) -> TurnResult:
    request_id = request.request_id
    assert request_id is not None
    await _call(callbacks.on_start, request_id)
    pump: asyncio.Task[None] | None = None
    on_event = callbacks.on_event
    if on_event is not None and _is_async(on_event):
        queue: asyncio.Queue[Any] = asyncio.Queue()
        request.emit = queue.put_nowait
        pump = asyncio.create_task(_forward(queue, on_event))
    else:
        request.emit = callbacks.on_event
    try:
        try:
            result = await run(request)
        finally:
            if pump is not None:
                queue.put_nowait(None)  # every chunk is delivered before on_done / on_error
                await pump
    except Exception as exc:
        if callbacks.on_error is None:
            raise
        await _call(callbacks.on_error, exc)
        return TurnResult(request_id=request_id, status="error", error=str(exc) or type(exc).__name__)
    if result.status == "completed":
        await _call(callbacks.on_done, result)
    elif result.status == "error":
        await _call(callbacks.on_error, result.error)
    return result
