"""think's pool for blocking calls (``think_core.threads``), where a plain ``def`` tool runs:
results and errors reach the awaiting task, the caller's context variables go with the call,
calls run in parallel up to the pool's size and wait beyond it, a cancelled caller's call still
ends without harm, and a tool really runs off the event loop's thread."""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from think_core import ScriptedModel, Step, Think, tool
from think_core.models.scripted import call
from think_core.threads import BlockingThreads

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


async def test_results_and_errors_reach_the_caller() -> None:
    pool = BlockingThreads(2)

    def fails() -> None:
        raise KeyError("missing")

    def stops() -> None:
        raise StopIteration

    assert await pool.run(divmod, 7, 2) == (3, 1)
    with pytest.raises(KeyError, match="missing"):
        await pool.run(fails)
    with pytest.raises(RuntimeError):  # (a future cannot hold StopIteration, as with run_in_executor)
        await pool.run(stops)


async def test_the_callers_context_goes_with_the_call_and_does_not_come_back() -> None:
    pool = BlockingThreads(2)

    def read_and_set() -> str:
        seen = REQUEST.get()
        REQUEST.set("changed in the thread")
        return seen

    REQUEST.set("req-1")
    assert await pool.run(read_and_set) == "req-1"
    assert REQUEST.get() == "req-1"


async def test_calls_run_in_parallel_up_to_the_pool_size_and_wait_beyond_it() -> None:
    pool = BlockingThreads(3, name="bounded")
    together = threading.Barrier(3, timeout=30)  # only three threads at once can pass it
    running: set[str] = set()

    def meet(n: int) -> int:
        running.add(threading.current_thread().name)
        together.wait()
        return n

    assert await asyncio.gather(*(pool.run(meet, n) for n in range(9))) == list(range(9))
    assert len(running) == 3 and all(name.startswith("bounded_") for name in running)
    assert threading.current_thread().name not in running


async def test_a_cancelled_callers_call_still_ends_and_the_pool_goes_on() -> None:
    pool = BlockingThreads(1)
    release, ended = threading.Event(), threading.Event()

    def slow() -> str:
        release.wait(30)
        ended.set()
        return "late"

    waiting = asyncio.ensure_future(pool.run(slow))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    assert await pool.run(str.upper, "next") == "NEXT"  # the one thread came free
    assert ended.is_set()


def test_a_call_still_running_when_the_program_ends_is_not_cut_short(tmp_path: Path) -> None:
    # A tool whose turn was cancelled runs on; the program's end waits for it, as asyncio.run
    # waited for the default executor's calls.
    done = tmp_path / "done"
    program = f"""
import asyncio, pathlib, time
from think_core.threads import blocking_threads

def slow_side_effect():
    time.sleep(0.5)
    pathlib.Path({str(done)!r}).write_text("written")

async def main():
    call = asyncio.ensure_future(blocking_threads().run(slow_side_effect))
    await asyncio.sleep(0.05)
    call.cancel()

asyncio.run(main())
"""
    subprocess.run([sys.executable, "-c", program], check=True, timeout=60)
    assert done.read_text() == "written"


def test_one_pool_serves_one_loop_after_another() -> None:
    pool = BlockingThreads(2)
    assert [asyncio.run(pool.run(abs, -n)) for n in range(3)] == [0, 1, 2]


async def test_a_plain_tool_runs_off_the_loop_while_another_chat_streams() -> None:
    loop_thread = threading.current_thread()
    ran_on: list[threading.Thread] = []
    release = threading.Event()

    def slow_lookup(city: str) -> str:
        """Look a city up (blocks until released)."""
        ran_on.append(threading.current_thread())
        release.wait(30)
        return f"{city}: found"

    model = ScriptedModel([Step(tool_calls=[call("slow_lookup", {"city": "Oslo"})]), "Found."])
    talker = ScriptedModel(["one two three four five six"], delay=0.01)
    async with Think(model, tools=[tool(slow_lookup)], store=":memory:", load_entrypoints=False) as agent, \
            Think(talker, store=":memory:", load_entrypoints=False) as other:
        looked_up = asyncio.ensure_future(agent.session("a").chat("Find Oslo"))
        deadline = time.monotonic() + 30
        while not ran_on and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert (await other.session("b").chat("Talk")).text == "one two three four five six"
        assert not looked_up.done()  # the other chat streamed whole while the tool blocked
        release.set()
        assert (await looked_up).text == "Found."
    assert ran_on and ran_on[0] is not loop_thread
