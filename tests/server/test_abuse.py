"""Bounded under abuse: what one client sends cannot grow the server's memory without bound or
get a 500, and ``think serve`` announces itself only once it accepts connections.

Against a real ``think serve`` process (its memory read from ``/proc``) and real clients.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.support.serve import ROOT, think_serve

TIMEOUT = 60.0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def transcript(n: int, size: int) -> list[dict[str, Any]]:
    """``n`` user messages of about ``size`` bytes in all (a client's whole transcript)."""
    each = "x" * (size // n)
    return [{"id": f"u{i}", "role": "user", "parts": [{"type": "text", "text": f"{i} {each}"}]} for i in range(n)]


def serve_env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "THINK_HOME": str(tmp_path)}
    env.pop("THINK_API_TOKEN", None)
    return env


async def identified(ws: Any) -> None:
    while json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))["type"] != "cf_agent_identity":
        pass


async def flood_then_leave(url: str, watcher: Any, round_: int) -> None:
    """One socket sends 3,000 setMessages frames of ~55 KB as fast as the server takes them, then a
    short last one, and leaves once the other tab has been sent that last transcript."""
    async with connect(url, max_size=None) as flooder:
        await identified(flooder)
        frames = [
            json.dumps({"type": "cf_agent_chat_messages", "messages": transcript(40, 55_000 + 10 * round_ + i)})
            for i in range(3)
        ]
        for i in range(3000):
            await flooder.send(frames[i % 3])
        last_ids = [f"r{round_}a", f"r{round_}b"]
        last = [{"id": i, "role": "user", "parts": [{"type": "text", "text": i}]} for i in last_ids]
        await flooder.send(json.dumps({"type": "cf_agent_chat_messages", "messages": last}))
        # The last one wins: the other tab ends up with the flooder's last transcript.
        while True:
            frame = json.loads(await asyncio.wait_for(watcher.recv(), TIMEOUT))
            if frame["type"] == "cf_agent_chat_messages" and [m["id"] for m in frame["messages"]] == last_ids:
                return


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the server's memory from /proc")
async def test_a_set_messages_flood_from_one_socket_keeps_the_servers_memory_bounded(tmp_path: Path) -> None:
    async with think_serve("--model", "demo", "--db", str(tmp_path / "db.sqlite"), env=serve_env(tmp_path)) as (proc, base):
        url = base.replace("http://", "ws://") + "/agents/think/flood"
        async with connect(url, max_size=None) as watcher:
            await identified(watcher)
            before = rss_mib(proc.pid)
            after = []
            # Three flooders, one after the other. What a flood costs the server at its peak
            # (transcripts parsed before they are coalesced) depends on scheduling, so any one of
            # them may grow RSS; but if a flooder's frames, tasks or transcripts were kept after
            # it left, each would add as much again on top, and three would cost three times one.
            for round_ in (1, 2, 3):
                await flood_then_leave(url, watcher, round_)
                after.append(rss_mib(proc.pid))
    # Before the replacements were coalesced, one flood took the server from ~70 to ~355 MiB
    # (and ~300 MiB stayed after the client left).
    assert after[-1] - before < 80, f"three floods grew RSS from {before:.0f} MiB: {[round(a) for a in after]}"


async def test_lone_surrogates_and_deep_metadata_get_400_with_nothing_stored(tmp_path: Path) -> None:
    bodies = [
        '{"id":"s1","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"bad \\ud800"}]}]}',
        '{"id":"\\ud800","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]}',
        '{"id":"s1","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}],"metadata":{"a":'
        + "[" * 950 + "]" * 950 + "}}]}",
    ]
    async with think_serve("--model", "demo", "--db", str(tmp_path / "db.sqlite"), env=serve_env(tmp_path)) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
            for body in bodies:
                response = await http.post("/api/chat", content=body, headers={"content-type": "application/json"})
                assert response.status_code == 400, (body[:60], response.text)
                assert response.json()["error"]["type"] == "invalid_json"
            assert (await http.get("/api/sessions/s1/messages")).json()["messages"] == []
        async with connect(base.replace("http://", "ws://") + "/agents/think/s1") as ws:
            await ws.send('{"type":"cf_agent_chat_messages","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"\\udfff"}]}]}')
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
                if frame["type"] == "cf_agent_error":
                    break
            assert "lone surrogate" in frame["error"]["message"]


async def test_the_serving_line_comes_once_the_server_accepts_connections(tmp_path: Path) -> None:
    # No retry, no polling: the first request right after the line must be served.
    async with think_serve("--model", "demo", "--db", str(tmp_path / "db.sqlite"), env=serve_env(tmp_path)) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
            assert (await http.get("/healthz")).status_code == 200


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
async def test_slow_headers_are_dropped_after_the_header_timeout_while_a_websocket_stays(
    tmp_path: Path, implementation: str
) -> None:
    # Over both of uvicorn's HTTP/1.1 implementations (httptools is the default where installed).
    args = ("--model", "demo", "--db", str(tmp_path / "db.sqlite"), "--header-timeout", "2", "--http", implementation)
    async with think_serve(*args, env=serve_env(tmp_path)) as (_, base):
        host, port = base.removeprefix("http://").split(":")
        slow = [await asyncio.open_connection(host, int(port)) for _ in range(50)]
        async with connect(base.replace("http://", "ws://") + "/agents/think/quiet") as ws:  # idle, but a WebSocket
            loop = asyncio.get_running_loop()
            started = loop.time()
            header = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 40

            async def dribble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
                """Send the header a byte a quarter second; the time the server closed on us."""
                for byte in header:
                    try:
                        writer.write(bytes([byte]))
                        await writer.drain()
                    except ConnectionError:
                        break
                    if reader.at_eof():
                        break
                    try:
                        await asyncio.wait_for(reader.read(1), 0.25)
                        break  # end of stream (or an answer): closed
                    except TimeoutError:
                        pass
                writer.close()
                return loop.time() - started

            closed_after = await asyncio.gather(*(dribble(r, w) for r, w in slow))
            assert all(1.5 < t < 8 for t in closed_after), sorted(closed_after)[:3] + sorted(closed_after)[-3:]
            # The WebSocket, opened at the same time and silent since, is still served.
            await ws.send(json.dumps({"type": "cf_agent_stream_resume_request"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))["type"]
        async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
            assert (await http.get("/healthz")).status_code == 200


def test_auto_serves_on_h11_where_httptools_cannot_be_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from think_core.server.header_timeout import HeaderDeadline, http_protocol, with_header_timeout

    monkeypatch.setitem(sys.modules, "httptools", None)  # an import of it raises ImportError
    monkeypatch.delitem(sys.modules, "uvicorn.protocols.http.httptools_impl", raising=False)
    assert http_protocol("auto") is H11Protocol
    assert issubclass(with_header_timeout(3.0), HeaderDeadline) and issubclass(with_header_timeout(3.0), H11Protocol)
    with pytest.raises(ImportError):
        http_protocol("httptools")


def test_root_is_the_repository() -> None:  # the helpers above start `think serve` from there
    assert (ROOT / "think_core").is_dir()
