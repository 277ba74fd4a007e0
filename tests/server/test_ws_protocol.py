"""The lean receive queue and write flag ``think serve``'s WebSocket protocol gives uvicorn in
place of an ``asyncio.Queue`` and an ``asyncio.Event``: the same behaviour for what uvicorn
calls, nothing held while idle. (Every WebSocket test goes through them too.)"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
import uvicorn
from websockets.asyncio.client import connect
from websockets.http11 import Request
from websockets.protocol import Protocol

from think_core.server.header_timeout import with_header_timeout
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


# -- what an open connection keeps, on a real uvicorn server with a real client -------------------


async def _echo(scope: dict, receive: Any, send: Any) -> None:
    """A WebSocket that echoes text frames back until the client closes."""
    assert scope["type"] == "websocket"
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        await send({"type": "websocket.send", "text": message["text"]})


def _alive(kind: type) -> list[Any]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, kind)]


@pytest.mark.parametrize("implementation", ["h11", "httptools"])
async def test_an_open_websocket_keeps_neither_its_upgrade_request_nor_the_http_protocol(implementation: str) -> None:
    """After the handshake, neither the HTTP/1.1 protocol that read the upgrade request (its
    header timer used to hold it for the timeout's 10 s) nor ``websockets``' parser (whose
    handshake frame held the parsed request) keeps the request; frames still flow both ways,
    one sent right behind the handshake included."""
    if implementation == "httptools":
        pytest.importorskip("httptools")
    http_class = with_header_timeout(10.0, implementation)
    config = uvicorn.Config(_echo, host="127.0.0.1", port=0, http=http_class, lifespan="off", log_level="warning",
                            **uvicorn_ws_options("large"))
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}/") as ws:
            await ws.send("right behind the handshake")
            assert await asyncio.wait_for(ws.recv(), 10) == "right behind the handshake"
            [protocol] = _alive(CompactWebSocketProtocol)
            assert protocol.conn.parser.gi_code is Protocol.parse.__code__  # restarted, frames only
            # websockets' parsed upgrade request is gone (the client, in this process, keeps its own)
            assert [r for r in _alive(Request) if r is not ws.request] == []
            assert _alive(http_class) == []  # and the HTTP protocol with its timer
            for text in ("a", "ü" * 70_000, "b"):  # (one large enough to be compressed, in several reads)
                await ws.send(text)
                assert await asyncio.wait_for(ws.recv(), 10) == text
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)
