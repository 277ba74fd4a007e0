"""The lean receive queue and write flag ``think serve``'s WebSocket protocol gives uvicorn in
place of an ``asyncio.Queue`` and an ``asyncio.Event``: the same behaviour for what uvicorn
calls, nothing held while idle. (Every WebSocket test goes through them too.)"""

from __future__ import annotations

import asyncio

import pytest

from think_core.server.ws_protocol import CompactWebSocketProtocol, _ReceiveQueue, _WritableFlag, uvicorn_ws_options


async def test_the_receive_queue_hands_items_over_in_order_and_waits_when_empty() -> None:
    queue = _ReceiveQueue()
    assert queue.empty()
    queue.put_nowait({"n": 1})
    queue.put_nowait({"n": 2})
    assert not queue.empty()
    assert await queue.get() == {"n": 1}
    assert await queue.get() == {"n": 2}
    assert queue.empty() and queue._items is None  # nothing held while empty

    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    queue.put_nowait({"n": 3})
    assert await asyncio.wait_for(waiting, 5) == {"n": 3}


async def test_a_cancelled_get_loses_nothing() -> None:
    queue = _ReceiveQueue()
    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    queue.put_nowait("kept")
    assert await asyncio.wait_for(queue.get(), 5) == "kept"


async def test_the_write_flag_releases_every_waiter_when_set() -> None:
    flag = _WritableFlag()
    assert not flag.is_set()
    waiters = [asyncio.create_task(flag.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    flag.set()
    assert await asyncio.wait_for(asyncio.gather(*waiters), 5) == [True, True, True]
    assert flag._waiters is None
    assert await asyncio.wait_for(flag.wait(), 5) is True  # set: no wait
    flag.clear()
    late = asyncio.create_task(flag.wait())
    await asyncio.sleep(0)
    assert not late.done()
    late.cancel()
    with pytest.raises(asyncio.CancelledError):
        await late
    assert not flag._waiters  # the cancelled waiter is gone


def test_each_mode_gets_the_protocol_with_its_compression() -> None:
    for mode, deflate in (("large", True), ("all", True), ("off", False)):
        options = uvicorn_ws_options(mode)
        assert issubclass(options["ws"], CompactWebSocketProtocol) and options["ws"].compression == mode
        assert options["ws_per_message_deflate"] is deflate
    with pytest.raises(ValueError, match="not a WebSocket compression mode"):
        uvicorn_ws_options("fast")
