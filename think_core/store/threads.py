"""The store's own threads: where its blocking calls run, off the event loop.

``loop.run_in_executor`` costs a ``concurrent.futures.Future`` chained to an asyncio one and a
wake of the event loop (a write to its self-pipe) per call. Under a burst — hundreds of chats
opening at once, each a few store calls — those wakes are most of a call's cost. Here a call's
result goes straight to its asyncio future, and the results finished while the loop was busy are
handed over together: one wake per loop iteration, however many calls ended in it.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["StoreThreads"]

T = TypeVar("T")

_STOP = None

# A finished call: its future and what it returned (True) or raised (False).
_Done = tuple["asyncio.Future[Any]", bool, Any]
_Call = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


class StoreThreads:
    """``await threads.run(call)`` runs ``call()`` on one of ``workers`` threads, in the order
    the calls were made (one worker: one at a time, as SQLite's single connection needs)."""

    def __init__(self, workers: int = 1, name: str = "think-store") -> None:
        self._workers = max(1, workers)
        self._name = name
        self._fresh()

    def _fresh(self) -> None:
        """No thread, no call queued, no result waiting (and locks nobody holds)."""
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        # Results waiting for their loop, per loop; a loop with a list here has a hand-over
        # scheduled that has not run yet.
        self._finished: dict[asyncio.AbstractEventLoop, list[_Done]] = {}
        self._finished_lock = threading.Lock()

    async def run(self, call: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if not self._threads:
            self._start()
        self._calls.put((call, future, loop))
        return await future

    def shutdown(self) -> None:
        """Run the calls already made, then stop the threads (wait for them)."""
        threads, self._threads = self._threads, []
        _RUNNING.discard(self)
        for _ in threads:
            self._calls.put(_STOP)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()

    def _start(self) -> None:
        with self._start_lock:
            if self._threads:
                return
            # Daemon threads, stopped at exit by the hook below: a store nobody closed must not
            # hold the interpreter open. A call cut at exit is a transaction that never
            # committed, which the database rolls back.
            threads = [
                threading.Thread(target=self._work, name=f"{self._name}_{i}", daemon=True) for i in range(self._workers)
            ]
            for thread in threads:
                thread.start()
            self._threads = threads
            _RUNNING.add(self)

    def _work(self) -> None:
        calls = self._calls
        while True:
            item = calls.get()
            if item is _STOP:
                return
            call, future, loop = item
            try:
                done: _Done = (future, True, call())
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task, as an executor does
                done = (future, False, exc)
            self._hand_over(loop, done)
            del item, call, future, done  # nothing of a call outlives it on this thread

    def _hand_over(self, loop: asyncio.AbstractEventLoop, done: _Done) -> None:
        with self._finished_lock:
            waiting = self._finished.get(loop)
            if waiting is not None:  # a hand-over to this loop is already on its way
                waiting.append(done)
                return
            self._finished[loop] = [done]
        try:
            loop.call_soon_threadsafe(self._resolve, loop)
        except RuntimeError:  # the loop was closed: nobody awaits these any more
            with self._finished_lock:
                self._finished.pop(loop, None)

    def _resolve(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._finished_lock:
            finished = self._finished.pop(loop, [])
        for future, ok, value in finished:
            if future.cancelled():  # the caller gave up; the call ran all the same
                continue
            if ok:
                future.set_result(value)
            else:  # (a future cannot hold StopIteration)
                future.set_exception(RuntimeError(value) if isinstance(value, StopIteration) else value)


_RUNNING: weakref.WeakSet[StoreThreads] = weakref.WeakSet()


@atexit.register
def _shutdown_at_exit() -> None:
    for threads in list(_RUNNING):
        threads.shutdown()


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads (and maybe a lock one of them held): its
    stores start theirs afresh on their first call instead of queueing calls nobody runs."""
    for threads in list(_RUNNING):
        threads._fresh()
    _RUNNING.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)
