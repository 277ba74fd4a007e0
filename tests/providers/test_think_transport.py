"""think's own httpx transport (``ThinkTransport``) against real loopback servers: both body
framings, keep-alive reuse counted on the server's side, responses that must not be reused,
servers that die mid-body, timeouts, TLS, gzip, request bodies and the pool's limits."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import ssl
from collections.abc import AsyncGenerator, AsyncIterator

import httpx
import pytest

from tests.loopback import LoopbackServer, Reply
from tests.support.net import closed_port
from tests.support.wire import ask, collect, oa_text, openai_model, text_of
from think_core.models._http import body_reads, finish_reading, shared_ssl_context
from think_core.models.openai import OpenAIChatModel

pytest.importorskip("httptools")
from think_core.models._h1_transport import ThinkTransport  # noqa: E402


def client(limits: httpx.Limits | None = None, *, verify: ssl.SSLContext | None = None,
           timeout: httpx.Timeout | float = 10) -> httpx.AsyncClient:
    transport = ThinkTransport(verify=verify or shared_ssl_context(), limits=limits or httpx.Limits())
    return httpx.AsyncClient(transport=transport, timeout=timeout)


async def test_chunked_and_content_length_bodies_arrive_whole_over_one_kept_alive_connection(
    loopback: LoopbackServer,
) -> None:
    loopback.enqueue(Reply(body=[b"Hel", b"lo ", b"caf\xc3\xa9"], headers={"x-kind": "chunked"}),
                     Reply(body=b'{"whole": true}', headers={"content-type": "application/json"}),
                     Reply(status=404, body=b"nothing here"))
    async with client() as http:
        chunked = await http.get(loopback.url + "/a")
        assert (chunked.status_code, chunked.text, chunked.headers["x-kind"]) == (200, "Hello café", "chunked")
        assert chunked.http_version == "HTTP/1.1" and chunked.reason_phrase == "OK"
        assert (await http.get(loopback.url + "/b")).json() == {"whole": True}
        missing = await http.get(loopback.url + "/c")
        assert (missing.status_code, missing.text) == (404, "nothing here")
    assert [r.path for r in loopback.requests] == ["/a", "/b", "/c"]
    assert loopback.connections == 1  # the server saw one socket carry all three


async def test_request_bodies_go_whole_or_chunked(loopback: LoopbackServer) -> None:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one,", b"", b"two,", b"three"):
            yield part

    loopback.enqueue(Reply(body=b"ok"), Reply(body=b"ok"))
    async with client() as http:
        await http.post(loopback.url + "/json", json={"q": "café"})
        await http.post(loopback.url + "/stream", content=parts())
    whole, streamed = loopback.requests
    assert whole.json == {"q": "café"} and whole.headers["content-length"] == str(len(whole.body))
    assert streamed.headers["transfer-encoding"] == "chunked" and streamed.body == b"one,two,three"


async def test_gzip_bodies_are_decoded_above_the_transport(loopback: LoopbackServer) -> None:
    packed = gzip.compress(b"data: squeezed\n\n" * 50)
    loopback.enqueue(Reply(body=packed, headers={"content-encoding": "gzip"}),
                     Reply(body=[packed[:20], packed[20:]], headers={"content-encoding": "gzip"}))
    async with client() as http:
        assert (await http.get(loopback.url)).text == "data: squeezed\n\n" * 50
        async with http.stream("GET", loopback.url) as response:
            assert b"".join([part async for part in response.aiter_bytes()]) == b"data: squeezed\n\n" * 50


async def test_a_gzipped_event_stream_reaches_the_provider_decoded(loopback: LoopbackServer) -> None:
    # the provider reads raw bytes unless the body is content-encoded: then httpx decodes it
    packed = gzip.compress(oa_text("squeezed", " stream").encode())
    loopback.enqueue(Reply(headers={"content-type": "text/event-stream", "content-encoding": "gzip"},
                           body=[packed[:30], packed[30:]]))
    assert text_of(await collect(openai_model(loopback), ask())) == "squeezed stream"


@pytest.mark.parametrize("end", ["with the marker", "a while after it"])
async def test_a_stream_read_to_its_end_marker_leaves_its_connection_to_the_next_step(
    loopback: LoopbackServer, end: str,
) -> None:
    # The marker's read holds the end of the body (one write, content-length), or the chunked
    # terminator comes 0.3 s after it: then it is waited for, and the connection is reused too.
    def reply(text: str) -> Reply:
        stream = oa_text(text)
        if end == "with the marker":
            return Reply(headers={"content-type": "text/event-stream"}, body=stream.encode())
        return Reply.sse(stream, chunks=[stream.encode(), b""], chunk_delay=0.3)

    loopback.enqueue(reply("first"), reply("second"))
    async with client() as http:
        model = OpenAIChatModel("gpt-4o", base_url=loopback.url + "/v1", api_key="sk-test", client=http)
        assert [text_of(await collect(model, ask())) for _ in range(2)] == ["first", "second"]
    assert loopback.connections == 1


async def test_a_response_whose_end_has_arrived_is_not_drained(loopback: LoopbackServer) -> None:
    # Through httpx's own wrapping of the transport's body, as a provider reads it: the body (one
    # write, content-length) ends with its first read, and nothing is read after it.
    loopback.enqueue(Reply(headers={"content-type": "text/event-stream"}, body=b"data: [DONE]\n\n"))

    async def unread() -> AsyncGenerator[bytes, None]:
        raise AssertionError("drained a response that had ended")
        yield b""  # pragma: no cover

    async with client() as http, http.stream("GET", loopback.url + "/done") as response:
        reads = body_reads(response)
        assert await anext(reads) == b"data: [DONE]\n\n"
        events = unread()
        await finish_reading(events, response)
        await events.aclose()
        assert [piece async for piece in reads] == []  # the end had come: nothing more to read
    assert loopback.connections == 1


async def test_a_response_closed_early_drops_its_connection(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply(body=[b"first", *[b"more"] * 50], chunk_delay=0.05), Reply(body=b"next"))
    async with client() as http:
        async with http.stream("GET", loopback.url + "/long") as response:
            async for part in response.aiter_raw():
                assert part.startswith(b"first")
                break
        await loopback.wait_abandoned()  # the server saw the client hang up mid-body
        assert (await http.get(loopback.url + "/next")).text == "next"
    assert loopback.connections == 2  # the half-read connection was not reused


async def test_a_cancelled_read_drops_its_connection(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply(body=[b"first", b"late"], chunk_delay=30), Reply(body=b"next"))
    first = asyncio.Event()
    async with client() as http:
        async def read() -> None:
            async with http.stream("GET", loopback.url) as response:
                async for _ in response.aiter_raw():
                    first.set()

        reading = asyncio.create_task(read())
        await first.wait()
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        assert (await http.get(loopback.url)).text == "next"
    assert loopback.connections == 2


@pytest.mark.parametrize("side", ["request", "response"])
async def test_connection_close_is_not_reused(loopback: LoopbackServer, side: str) -> None:
    close = {"connection": "close"}
    loopback.enqueue(Reply(body=b"one", headers=close if side == "response" else {}), Reply(body=b"two"))
    async with client() as http:
        assert (await http.get(loopback.url, headers=close if side == "request" else {})).text == "one"
        assert (await http.get(loopback.url)).text == "two"
    assert loopback.connections == 2


@pytest.mark.parametrize(("reset", "error"), [(False, httpx.RemoteProtocolError), (True, httpx.ReadError)],
                         ids=["fin", "rst"])
async def test_a_server_dying_mid_body_is_an_httpx_transport_error(
    loopback: LoopbackServer, reset: bool, error: type[httpx.TransportError]
) -> None:
    loopback.enqueue(Reply(body=[b"Hel", b"lo"], disconnect_after=1, reset=reset), Reply(body=b"after"))
    seen: list[bytes] = []
    async with client() as http:
        with pytest.raises(error):
            async with http.stream("GET", loopback.url) as response:
                async for part in response.aiter_raw():
                    seen.append(part)
        assert (await http.get(loopback.url)).text == "after"  # the pool goes on with a new connection
    assert seen == [b"Hel"]


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
async def test_a_server_hanging_up_before_answering_is_retried_by_the_provider(
    loopback: LoopbackServer, reset: bool
) -> None:
    # classification: the transport's error is an httpx.TransportError, which think retries
    # while nothing has streamed yet
    loopback.enqueue(Reply(no_response=True, reset=reset), Reply.sse(oa_text("fine")))
    events = await collect(openai_model(loopback), ask())
    assert text_of(events) == "fine"
    assert len(loopback.requests) == 2


async def test_read_timeouts_hold_per_read_not_per_response(loopback: LoopbackServer) -> None:
    # 40 reads 50 ms apart outlast the 1.5 s read timeout together, never one at a time
    loopback.enqueue(Reply(body=[b"x"] * 40, chunk_delay=0.05),
                     Reply(body=b"late", delay=30),
                     Reply(body=[b"first", b"late"], chunk_delay=30))
    async with client(timeout=httpx.Timeout(10, read=1.5)) as http:
        assert (await http.get(loopback.url)).text == "x" * 40
    async with client(timeout=httpx.Timeout(10, read=0.2)) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get(loopback.url)  # no status line
    async with client(timeout=httpx.Timeout(10, read=0.2)) as http:
        with pytest.raises(httpx.ReadTimeout):
            async with http.stream("GET", loopback.url) as response:
                async for part in response.aiter_raw():
                    assert part == b"first"


async def test_a_refused_connection_names_host_and_port() -> None:
    port = closed_port()
    async with client() as http:
        with pytest.raises(httpx.ConnectError, match=f"cannot connect to 127.0.0.1:{port}"):
            await http.get(f"http://127.0.0.1:{port}/")


async def test_a_connect_that_hangs_times_out_as_httpx_does() -> None:
    # a listening socket whose accept queue is full drops further SYNs: the connect hangs
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(8)]
        try:
            for filler in fillers:
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
            async with client(timeout=httpx.Timeout(10, connect=0.3)) as http:
                with pytest.raises(httpx.ConnectTimeout, match=f"connecting to 127.0.0.1:{port}"):
                    await http.get(f"http://127.0.0.1:{port}/")
        finally:
            for filler in fillers:
                filler.close()


async def test_tls_with_a_trusted_certificate_and_not_without() -> None:
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    trusting = ssl.create_default_context()
    authority.configure_trust(trusting)
    async with LoopbackServer(tls=server_context) as server:
        server.enqueue(Reply(body=[b"sec", b"ret"]), Reply(body=b"again"))
        assert server.url.startswith("https://")
        async with client(verify=trusting) as http:
            assert (await http.get(server.url)).text == "secret"
            assert (await http.get(server.url)).text == "again"
        assert server.connections == 1
        async with client(verify=ssl.create_default_context()) as http:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await http.get(server.url)


async def test_a_thousand_streams_share_the_pool_limit(loopback: LoopbackServer) -> None:
    count, limit = 1000, 50
    loopback.handler = lambda request: Reply(body=[request.path.encode(), b"|end"])
    async with client(httpx.Limits(max_connections=limit, max_keepalive_connections=limit)) as http:
        async def one(i: int) -> str:
            async with http.stream("GET", f"{loopback.url}/{i}") as response:
                return b"".join([part async for part in response.aiter_raw()]).decode()

        texts = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(count))), 120)
    assert texts == [f"/{i}|end" for i in range(count)]
    assert loopback.connections <= limit  # queued requests waited for a connection and reused it


async def test_a_full_pool_times_out_as_httpx_does(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply(body=[b"held", b"end"], chunk_delay=30))
    async with client(httpx.Limits(max_connections=1), timeout=httpx.Timeout(10, pool=0.2)) as http:
        async with http.stream("GET", loopback.url) as held:
            async for _ in held.aiter_raw():
                break
            with pytest.raises(httpx.PoolTimeout):
                await http.get(loopback.url)


def test_the_transport_runs_on_uvloop_too() -> None:
    # think serve and the CLI run on uvloop (the fast extra), whose transports are its own classes
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        async with LoopbackServer() as server:
            server.enqueue(Reply(body=[b"on ", b"uv"]), Reply(body=b"loop"), Reply(body=[b"slow"], delay=30))
            async with client(timeout=httpx.Timeout(10, read=0.2)) as http:
                assert (await http.get(server.url)).text == "on uv"
                assert (await http.get(server.url)).text == "loop"
                with pytest.raises(httpx.ReadTimeout):
                    await http.get(server.url)
            assert server.connections == 1

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


async def raw_server(answer: bytes) -> tuple[asyncio.Server, str]:
    """A server that reads one request head, writes ``answer`` and hangs up."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"


@pytest.mark.parametrize(("answer", "outcome"), [
    (b"HTTP/1.1 200 OK\r\n\r\nuntil the end", "until the end"),  # neither length nor chunked
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nafter", "after"),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\nshort", httpx.RemoteProtocolError),
    (b"NOT HTTP AT ALL\r\n\r\n", httpx.RemoteProtocolError),
], ids=["close-delimited", "100-continue", "short-content-length", "garbage"])
async def test_framings_from_the_edges(answer: bytes, outcome: str | type[Exception]) -> None:
    server, url = await raw_server(answer)
    async with server, client() as http:
        if isinstance(outcome, str):
            assert (await http.get(url)).text == outcome
        else:
            with pytest.raises(outcome):
                await http.get(url)


@pytest.mark.parametrize("limits", [httpx.Limits(keepalive_expiry=0), httpx.Limits(max_keepalive_connections=0)],
                         ids=["expired", "none-kept"])
async def test_connections_past_the_keep_alive_limits_are_closed(loopback: LoopbackServer, limits: httpx.Limits) -> None:
    loopback.enqueue(Reply(body=b"one"), Reply(body=b"two"))
    async with client(limits) as http:
        assert [(await http.get(loopback.url)).text for _ in range(2)] == ["one", "two"]
    assert loopback.connections == 2


async def test_a_full_pool_closes_an_idle_connection_to_another_origin(loopback: LoopbackServer) -> None:
    async with LoopbackServer() as other:
        loopback.enqueue(Reply(body=b"here"), Reply(body=b"back"))
        other.enqueue(Reply(body=b"there"))
        async with client(httpx.Limits(max_connections=1)) as http:
            assert (await http.get(loopback.url)).text == "here"
            assert (await http.get(other.url)).text == "there"  # the idle one to loopback made room
            assert (await http.get(loopback.url)).text == "back"
        assert (loopback.connections, other.connections) == (2, 1)
