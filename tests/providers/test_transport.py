"""The transport under think's own HTTP clients: think's (httptools) when the ``fast`` extra is
installed, httpx's when ``THINK_HTTP_TRANSPORT=httpx`` says so or a proxy is configured; either way a
streamed answer arrives whole, and a process's shared client holds far more than httpx's
default 100 connections open at once (a server streams hundreds of chats)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.loopback import LoopbackServer, Reply
from tests.support.wire import ask, collect, oa_text, openai_model, text_of
from think_core.errors import ConfigurationError
from think_core.models._http import SharedClient, shared_ssl_context
from think_core.models._transport import CLIENT_LIMITS, TRANSPORT_ENV, new_client

pytest.importorskip("httptools")
from think_core.models._h1_transport import ThinkTransport  # noqa: E402


def transport_of(client: httpx.AsyncClient) -> object:
    return client._transport


@pytest.mark.parametrize("choice", ["think", "httpx"])
async def test_a_stream_arrives_whole_over_either_transport(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch, choice: str
) -> None:
    monkeypatch.setenv(TRANSPORT_ENV, choice)
    async with new_client(httpx.Timeout(5), shared_ssl_context()) as client:
        expected = ThinkTransport if choice == "think" else httpx.AsyncHTTPTransport
        assert isinstance(transport_of(client), expected)
    # one write per event: every read is a separate chunk, as a live model sends them
    loopback.enqueue(Reply.sse(oa_text("The", " café", ' "hi"', "\n", "end"), chunk_size=9))
    events = await collect(openai_model(loopback), ask())
    assert text_of(events) == 'The café "hi"\nend'


async def test_an_environment_proxy_keeps_httpx_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx applies HTTPS_PROXY & co. only to its own transport: the proxy must not be bypassed
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    async with new_client(httpx.Timeout(5), shared_ssl_context()) as client:
        assert isinstance(transport_of(client), httpx.AsyncHTTPTransport)


PROXY_NAMES = [f"{scheme}_proxy" for scheme in ("http", "https", "all")]


@pytest.mark.parametrize("name", [*PROXY_NAMES, *(n.upper() for n in PROXY_NAMES)])
async def test_every_spelling_of_a_proxy_keeps_httpx_transport_and_an_empty_one_does_not(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # The proxies are read as urllib.request.getproxies() reads them on Linux (either case; an
    # empty value is no proxy), without decoding the whole environment per client.
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    for other in (*PROXY_NAMES, *(n.upper() for n in PROXY_NAMES)):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, "")
    async with new_client(httpx.Timeout(5), shared_ssl_context()) as client:
        assert isinstance(transport_of(client), ThinkTransport)
    monkeypatch.setenv(name, "http://127.0.0.1:9")
    async with new_client(httpx.Timeout(5), shared_ssl_context()) as client:
        assert isinstance(transport_of(client), httpx.AsyncHTTPTransport)


async def test_think_is_the_default_and_an_unknown_choice_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    async with new_client(httpx.Timeout(5), shared_ssl_context()) as client:
        assert isinstance(transport_of(client), ThinkTransport)
    monkeypatch.setenv(TRANSPORT_ENV, "aiohttp")
    with pytest.raises(ConfigurationError, match="THINK_HTTP_TRANSPORT='aiohttp': expected one of think, httpx"):
        new_client(httpx.Timeout(5), shared_ssl_context())


@pytest.mark.parametrize("choice", ["think", "httpx"])
async def test_the_shared_client_holds_more_than_100_streams_open(
    monkeypatch: pytest.MonkeyPatch, choice: str
) -> None:
    # A server that answers nobody until every request has arrived: with a pool of httpx's
    # default 100 connections the 101st request would never be sent and this would hang.
    monkeypatch.setenv(TRANSPORT_ENV, choice)
    count = 150
    assert count < CLIENT_LIMITS.max_connections  # type: ignore[operator]
    arrived = 0
    everyone = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal arrived
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        arrived += 1
        if arrived == count:
            everyone.set()
        await everyone.wait()
        body = json.dumps({"ok": True}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=count)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    shared = SharedClient()
    try:
        async with server:
            client = shared.get()
            replies = await asyncio.wait_for(asyncio.gather(*(client.post(url, json={}) for _ in range(count))), 60)
    finally:
        await shared.aclose()
    assert [r.json() for r in replies] == [{"ok": True}] * count
