"""The store's own threads: where its blocking calls run, off the event loop.

``loop.run_in_executor`` costs a ``concurrent.futures.Future`` chained to an asyncio one and a
wake of the event loop (a write to its self-pipe) per call. Under a burst — hundreds of chats
opening at once, each a few store calls — those wakes are most of a call's cost. Here a call's
result goes straight to its asyncio future, and the results finished while the loop was busy are
handed over together (:class:`~think_core.threads.Handover`): one wake per loop iteration,
however many calls ended in it.

A store on one connection can also take the calls queued behind each other as one group
(:class:`CallGroups`): one transaction around them, each call still undone alone when it raises,
so the burst pays one commit — the write to the database's log — instead of one per call.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import queue
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..threads import Handover

__all__ = ["CallGroups", "GroupBroken", "StoreThreads"]

T = TypeVar("T")

_STOP = None

_Call = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


#: The most calls one group holds: a group holds the database's write lock from its first call
#: to its commit, and other processes' writers wait for it.
MAX_GROUP = 32


class GroupBroken(Exception):
    """A group's transaction is gone (the database rolled it back on an I/O error, say): the
    call that found out, and every call after it in the group, fail with the error that broke
    it (``__cause__``), and the group's earlier calls with the failed commit's."""


@runtime_checkable
class CallGroups(Protocol):
    """A store that runs several queued calls as one transaction."""

    def together(self) -> AbstractContextManager[None]:
        """One transaction around the group's calls; it commits when the block ends."""
        ...

    def alone(self) -> AbstractContextManager[None]:
        """One call inside :meth:`together`: when it raises, its writes alone are undone (and
        the error goes on); :class:`GroupBroken` when the transaction itself is gone."""
        ...


class StoreThreads:
    """``await threads.run(call)`` runs ``call()`` on one of ``workers`` threads, in the order
    the calls were made (one worker: one at a time, as SQLite's single connection needs).
    ``groups``: the calls waiting when a worker takes one run with it as one group (see
    :class:`CallGroups`); a call's result is handed over once its group committed."""

    def __init__(self, workers: int = 1, name: str = "think-store", *, groups: CallGroups | None = None) -> None:
        self._workers = max(1, workers)
        self._name = name
        self._groups = groups
        self._fresh()

    def _fresh(self) -> None:
        """No thread, no call queued, no result waiting (and locks nobody holds)."""
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self._handover = Handover()

    async def run(self, call: Callable[[], T]) -> T:
        return await self.post(call, asyncio.get_running_loop())

    def post(self, call: Callable[[], T], loop: asyncio.AbstractEventLoop) -> asyncio.Future[T]:
        """Queue ``call``; the future on ``loop`` gets its outcome (await it, or not)."""
        future: asyncio.Future[T] = loop.create_future()
        if not self._threads:
            self._start()
        self._calls.put((call, future, loop))
        return future

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
        groups = self._groups
        while True:
            item = calls.get()
            if item is _STOP:
                return
            if groups is not None and not calls.empty():
                group, stop = self._take_group(item)
                self._run_group(groups, group)
                del item, group  # nothing of a call outlives it on this thread
                if stop:
                    return
                continue
            self._handover.run(*item)
            del item

    def _take_group(self, first: _Call) -> tuple[list[_Call], bool]:
        """``first`` and the calls queued behind it (up to :data:`MAX_GROUP`); and whether a stop
        came among them (it ends the worker once the group ran)."""
        group = [first]
        while len(group) < MAX_GROUP:
            try:
                item = self._calls.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return group, True
            group.append(item)
        return group, False

    def _run_group(self, groups: CallGroups, group: list[_Call]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        broken: BaseException | None = None
        try:
            with groups.together():
                for call, _future, _loop in group:
                    try:
                        with groups.alone():
                            value = call()
                    except GroupBroken as exc:
                        broken = exc.__cause__ or exc
                        raise
                    except BaseException as exc:  # noqa: BLE001 - this call's own error, undone alone
                        outcomes.append((False, exc))
                    else:  # (after the savepoint's release: one outcome per call, whatever fails there)
                        outcomes.append((True, value))
        except BaseException as exc:  # noqa: BLE001 - nothing of the group was committed
            failed = broken or exc
            outcomes = [(False, failed) if ok else (ok, value) for ok, value in outcomes]
            outcomes.extend([(False, failed)] * (len(group) - len(outcomes)))
        for (_call, future, loop), (ok, value) in zip(group, outcomes, strict=True):
            self._handover.give(loop, (future, ok, value))
        del outcomes, broken


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
