"""think's own worker threads: where blocking calls run, off the event loop.

``loop.run_in_executor`` (and so ``asyncio.to_thread``) costs a ``concurrent.futures.Future``
chained to an asyncio one and a wake of the event loop (a write to its self-pipe) per call. Here
a call's result goes straight to its asyncio future, and the results that finished while the loop
was busy are handed over together (:class:`Handover`): one wake per loop iteration, however many
calls ended in it — the two parallel tool calls of a step, a burst of store calls.

:class:`BlockingThreads` is the pool a plain (``def``) tool runs in: at most
``min(32, CPUs + 4)`` threads, as many as the default executor, started as calls need them.
The store's own threads (``store/threads.py``) hand results over the same way.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import functools
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["BlockingThreads", "Handover", "blocking_threads"]

T = TypeVar("T")

# A finished call: its future and what it returned (True) or raised (False).
Done = tuple["asyncio.Future[Any]", bool, Any]


class Handover:
    """Results of calls run on other threads, handed to their asyncio futures on the loop that
    awaits them: the results finished before the loop got to them go over in one wake."""

    def __init__(self) -> None:
        # Results waiting for their loop, per loop; a loop with a list here has a hand-over
        # scheduled that has not run yet.
        self._finished: dict[asyncio.AbstractEventLoop, list[Done]] = {}
        self._lock = threading.Lock()

    def give(self, loop: asyncio.AbstractEventLoop, done: Done) -> None:
        """From a worker thread: ``done``'s future gets its outcome on ``loop``."""
        with self._lock:
            waiting = self._finished.get(loop)
            if waiting is not None:  # a hand-over to this loop is already on its way
                waiting.append(done)
                return
            self._finished[loop] = [done]
        try:
            loop.call_soon_threadsafe(self._resolve, loop)
        except RuntimeError:  # the loop was closed: nobody awaits these any more
            with self._lock:
                self._finished.pop(loop, None)

    def run(self, call: Callable[[], Any], future: asyncio.Future[Any], loop: asyncio.AbstractEventLoop) -> None:
        """From a worker thread: ``call()`` here, its result or error to ``future`` on ``loop``."""
        try:
            done: Done = (future, True, call())
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task, as an executor does
            done = (future, False, exc)
        self.give(loop, done)

    def _resolve(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            finished = self._finished.pop(loop, [])
        for future, ok, value in finished:
            if future.cancelled():  # the caller gave up; the call ran all the same
                continue
            if ok:
                future.set_result(value)
            else:  # (a future cannot hold StopIteration)
                future.set_exception(RuntimeError(value) if isinstance(value, StopIteration) else value)


class BlockingThreads:
    """``await pool.run(function, *args, **kwargs)`` runs ``function`` on one of at most
    ``max_workers`` threads in the caller's context (its context variables, copied, as
    ``asyncio.to_thread`` does). A thread is started when a call finds none idle; threads stay
    for later calls. Cancelling the awaiting task does not stop a call that started: its result
    is dropped."""

    def __init__(self, max_workers: int | None = None, name: str = "think-blocking") -> None:
        self.max_workers = max_workers or min(32, (os.cpu_count() or 1) + 4)
        self._name = name
        self._handover = Handover()
        self._fresh()

    def _fresh(self) -> None:
        """No thread, no call queued (and locks nobody holds): also a forked child's start."""
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop]] = (
            queue.SimpleQueue()
        )
        self._idle = threading.Semaphore(0)  # one count per thread waiting for a call
        self._started = 0
        self._start_lock = threading.Lock()
        self._running = 0
        self._ended = threading.Condition()

    def wait_for_running_calls(self) -> None:
        """Block until no call runs (those queued behind them included)."""
        with self._ended:
            self._ended.wait_for(lambda: self._running == 0)

    async def run(self, function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        call = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
        with self._ended:
            self._running += 1
        self._calls.put((call, future, loop))
        if not self._idle.acquire(blocking=False):
            self._start()
        return await future

    def _start(self) -> None:
        with self._start_lock:
            if self._started >= self.max_workers:
                return  # the call waits for the first thread to come free
            self._started += 1
            number = self._started
        # A daemon thread: an idle one must not hold the interpreter open at exit (a call still
        # running then is waited for: see _let_running_calls_end).
        threading.Thread(target=self._work, name=f"{self._name}_{number}", daemon=True).start()

    def _work(self) -> None:
        calls, run = self._calls, self._handover.run
        while True:
            call, future, loop = calls.get()
            run(call, future, loop)
            del call, future  # nothing of a call outlives it on this thread
            with self._ended:
                self._running -= 1
                if not self._running:
                    self._ended.notify_all()
            self._idle.release()


_POOL: BlockingThreads | None = None
_POOL_LOCK = threading.Lock()


def blocking_threads() -> BlockingThreads:
    """The process's pool of threads for blocking calls (made on first use)."""
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = BlockingThreads()
    return _POOL


@atexit.register
def _let_running_calls_end() -> None:
    """The threads are daemons (an idle one must not hold the interpreter open), so a call still
    running when the program ends — a tool whose turn was cancelled — would be cut mid-way. It
    is waited for instead, as ``asyncio.run`` waits for the default executor's calls."""
    if _POOL is not None:
        _POOL.wait_for_running_calls()


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads: its pool starts afresh."""
    if _POOL is not None:
        _POOL._fresh()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)
