"""The store's threads: calls run off the loop in the order made, results and errors reach their
callers, a caller that gives up leaves the others untouched, and a burst of calls is handed back
in far fewer loop wakes than calls."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator

import pytest

from think_core.store.threads import StoreThreads


async def test_calls_run_on_the_store_thread_in_the_order_made() -> None:
    threads = StoreThreads(1)
    ran: list[tuple[int, str]] = []

    def call(i: int) -> int:
        ran.append((i, threading.current_thread().name))
        return i * 2

    try:
        results = await asyncio.gather(*(threads.run(lambda i=i: call(i)) for i in range(200)))
    finally:
        threads.shutdown()
    assert results == [i * 2 for i in range(200)]
    assert [i for i, _ in ran] == list(range(200))
    assert {name for _, name in ran} == {"think-store_0"}
    assert threading.main_thread().name not in {name for _, name in ran}


async def test_an_error_reaches_its_caller_only() -> None:
    threads = StoreThreads(1)

    def fail() -> None:
        raise ValueError("no such row")

    try:
        outcomes = await asyncio.gather(threads.run(lambda: 1), threads.run(fail), threads.run(lambda: 3),
                                        return_exceptions=True)
    finally:
        threads.shutdown()
    assert outcomes[0] == 1 and outcomes[2] == 3
    assert isinstance(outcomes[1], ValueError) and str(outcomes[1]) == "no such row"


async def test_a_cancelled_caller_leaves_the_call_and_the_others_whole() -> None:
    threads = StoreThreads(1)
    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def slow() -> str:
        entered.set()
        release.wait(30)
        ran.append("slow")
        return "slow"

    try:
        waiting = asyncio.ensure_future(threads.run(slow))
        after = asyncio.ensure_future(threads.run(lambda: "after"))
        assert await asyncio.to_thread(entered.wait, 30)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        assert await asyncio.wait_for(after, 30) == "after"
    finally:
        release.set()
        threads.shutdown()
    assert ran == ["slow"]  # it ran to its end: a store call is never cut in half


async def test_a_burst_is_handed_back_in_fewer_wakes_than_calls() -> None:
    threads = StoreThreads(1)
    loop = asyncio.get_running_loop()
    wakes = 0
    original = loop.call_soon_threadsafe

    def counting(*args: object, **kwargs: object) -> asyncio.Handle:
        nonlocal wakes
        wakes += 1
        return original(*args, **kwargs)  # type: ignore[arg-type]

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    gate = threading.Event()
    try:
        first = asyncio.ensure_future(threads.run(lambda: gate.wait(30)))
        rest = [threads.run(lambda i=i: i) for i in range(300)]
        gathered = asyncio.ensure_future(asyncio.gather(*rest))
        await asyncio.sleep(0)  # every call is queued behind the gate
        gate.set()
        # The loop is kept busy while the thread works, so finished calls pile up for one wake.
        deadline = loop.time() + 30
        while not gathered.done() and loop.time() < deadline:
            sum(range(20000))
            await asyncio.sleep(0)
        assert await gathered == list(range(300))
        assert await first is True
    finally:
        del loop.call_soon_threadsafe
        threads.shutdown()
    assert wakes < 150, wakes


def test_calls_from_one_loop_after_another_and_shutdown_runs_what_was_made() -> None:
    threads = StoreThreads(1)
    assert asyncio.run(threads.run(lambda: "first loop")) == "first loop"
    assert asyncio.run(threads.run(lambda: "second loop")) == "second loop"
    started = list(threads._threads)
    assert len(started) == 1
    threads.shutdown()
    assert not any(thread.is_alive() for thread in started)


async def test_several_workers_run_calls_side_by_side() -> None:
    threads = StoreThreads(2)
    both = threading.Barrier(2, timeout=30)

    def meet() -> str:
        both.wait()  # needs two calls running at once
        return threading.current_thread().name

    try:
        names = await asyncio.gather(threads.run(meet), threads.run(meet))
    finally:
        threads.shutdown()
    assert sorted(names) == ["think-store_0", "think-store_1"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_its_calls_on_threads_of_its_own() -> None:
    threads = StoreThreads(1)
    assert asyncio.run(threads.run(lambda: "parent")) == "parent"  # the parent's thread is up
    with warnings.catch_warnings():  # Python 3.12+ warns of fork() in a threaded process: the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: its copy of the store must not wait for the parent's thread
        code = 1
        try:
            code = 0 if asyncio.run(asyncio.wait_for(threads.run(lambda: "child"), 20)) == "child" else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    status = None
    while status is None and time.monotonic() < deadline:
        done, code = os.waitpid(pid, os.WNOHANG)
        status = code if done else None
        time.sleep(0.05)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    threads.shutdown()
    assert status is not None and os.waitstatus_to_exitcode(status) == 0


class _RecordingGroups:
    """A :class:`CallGroups` that records its groups, and can hold a group's commit."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.committing = threading.Event()
        self.commit = threading.Event()
        self.commit.set()

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        self.groups.append([])
        yield
        self.committing.set()
        assert self.commit.wait(30)

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        self.groups[-1].append(threading.current_thread().name)
        yield


async def _blocked(threads: StoreThreads) -> tuple[asyncio.Future[bool], threading.Event]:
    """A call holding the worker (taken alone: nothing else was queued yet), and its release."""
    entered, gate = threading.Event(), threading.Event()

    def hold() -> bool:
        entered.set()
        return gate.wait(30)

    first = asyncio.ensure_future(threads.run(hold))
    assert await asyncio.to_thread(entered.wait, 30)
    return first, gate


async def test_a_group_s_results_reach_their_callers_only_after_its_commit() -> None:
    groups = _RecordingGroups()
    threads = StoreThreads(1, groups=groups)
    first, gate = await _blocked(threads)
    try:
        rest = [asyncio.ensure_future(threads.run(lambda i=i: i)) for i in range(10)]
        await asyncio.sleep(0)  # all ten queued behind the held call
        groups.commit.clear()  # the group's commit will wait
        gate.set()
        assert await first is True
        assert await asyncio.to_thread(groups.committing.wait, 30)
        await asyncio.sleep(0.05)
        assert not any(call.done() for call in rest)  # ran, but nobody hears of it before the commit
        groups.commit.set()
        assert await asyncio.gather(*rest) == list(range(10))
    finally:
        gate.set()
        groups.commit.set()
        threads.shutdown()
    assert [len(group) for group in groups.groups] == [10]


async def test_a_stop_queued_behind_a_group_runs_the_group_first() -> None:
    groups = _RecordingGroups()
    threads = StoreThreads(1, groups=groups)
    first, gate = await _blocked(threads)
    rest = [asyncio.ensure_future(threads.run(lambda i=i: i)) for i in range(3)]
    await asyncio.sleep(0)
    worker = threads._threads[0]
    stopping = asyncio.ensure_future(asyncio.to_thread(threads.shutdown))  # the stop is queued last
    await asyncio.sleep(0.05)
    gate.set()
    await stopping
    assert not worker.is_alive()
    assert await first is True
    assert await asyncio.gather(*rest) == [0, 1, 2]
    assert [len(group) for group in groups.groups] == [3]


async def test_a_call_whose_savepoint_fails_to_close_fails_alone_and_the_worker_goes_on() -> None:
    class FailingRelease(_RecordingGroups):
        @contextlib.contextmanager
        def alone(self) -> Iterator[None]:
            self.groups[-1].append("call")
            yield
            if len(self.groups[-1]) == 2:  # the second call of the group: its release fails
                raise RuntimeError("release failed")

    groups = FailingRelease()
    threads = StoreThreads(1, groups=groups)
    first, gate = await _blocked(threads)
    try:
        rest = [asyncio.ensure_future(threads.run(lambda i=i: i)) for i in range(3)]
        await asyncio.sleep(0)
        gate.set()
        outcomes = await asyncio.gather(*rest, return_exceptions=True)
        assert await asyncio.wait_for(threads.run(lambda: "after"), 30) == "after"  # the worker lives
    finally:
        gate.set()
        threads.shutdown()
    assert outcomes[0] == 0 and outcomes[2] == 2
    assert isinstance(outcomes[1], RuntimeError) and str(outcomes[1]) == "release failed"
