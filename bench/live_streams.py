"""CPU per streamed event of N live chats at once, as a model really sends them.

A live model writes one event per network write, tens of milliseconds apart, and a server holds
hundreds of such streams at once. The loopback upstream here (a process of its own, so its work is
not on the measured event loop) answers every POST with a Chat Completions event stream of
``--events`` text deltas, each in its own HTTP/1.1 chunk and its own write, ``--gap`` ms apart
(the streams are spread over ten phases of the gap, so their writes do not all land together).

Each contender runs in a fresh process that opens N chats at once against that server:

  raw asyncio   asyncio streams, the chunked framing and the SSE lines by hand, ``json.loads``
  httpx         ``httpx.AsyncClient`` streaming, ``aiter_lines`` + ``json.loads``
  httpx+aiohttp the same over the ``httpx-aiohttp`` transport (when it is installed)
  httpx+think   the same over think's own transport (``ThinkTransport``, httptools' parser; when
                httptools is installed); ``... raw`` reads ``aiter_raw`` and splits the lines by
                hand, as think's provider does, so the row is the transport and httpx alone
  think         ``Think(OpenAIChatModel(...), load_entrypoints=False)``: a full turn per chat,
                each in its own session, answers stored in a SQLite file, the UI stream to an
                ``on_event`` callback (where the first word is noted)
  think+plugins as think, with the bundled entry-point plugins (otel disabled) and an
                ``on_chunk`` observer that counts every chunk (checked: one per event) and notes
                the first word, instead of ``on_event``
  ... (h11)     the think rows again with ``THINK_HTTP_TRANSPORT=httpx``: think's clients over
                httpx's own transport (httpcore, h11), as without the ``fast`` extra

Printed per N: the client process's CPU per event (``getrusage`` user + system, from the first
request to the last answer), its ratio to raw asyncio's in the same run, the wall time against
the ideal (events × gap), when the slowest chat got its first text (the burst's start-up: every
chat opens at once), how far behind the model the most delayed chat ended (its answer done minus
its first text, minus the model's own time between its first and last event: whether the client
keeps the model's pace once the words flow), and the client process's peak RSS. Every contender
checks that every chat received all of its text.

    python bench/live_streams.py                       # N = 100, 500, 1000
    python bench/live_streams.py --sizes 200 --rounds 2 --events 300 --gap 20
    python bench/live_streams.py --profile think --sizes 200   # cProfile of one contender
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _common import machine, median, table

from think_core import hookimpl

_TOKENS = ["The", " answer", " is", " forty", "-two", ".", "\n\n", "It", " said", ' "hi"', " to",
           " the", " café", " and", " left", "."]
PHASES = 10


def expected_text(n: int) -> str:
    return "".join(_TOKENS[i % len(_TOKENS)] for i in range(n))


def raise_fd_limit() -> None:
    """N sockets need N descriptors; lift the soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# -- the upstream (run in a child process) ------------------------------------------------------

def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def render_events(n: int) -> list[bytes]:
    """The stream's writes: role, n content deltas, finish, usage, [DONE], each a chunk; the
    last write also carries the chunked terminator."""
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"id": "chatcmpl-live", "object": "chat.completion.chunk", "created": 1700000000,
                "model": "live", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}

    events = [_sse(chunk({"role": "assistant", "content": ""}))]
    events += [_sse(chunk({"content": _TOKENS[i % len(_TOKENS)]})) for i in range(n)]
    events.append(_sse(chunk({}, "stop")))
    usage = chunk({}, usage={"prompt_tokens": 10, "completion_tokens": n, "total_tokens": n + 10})
    usage["choices"] = []
    events.append(_sse(usage))
    events.append(b"data: [DONE]\n\n")
    writes = [_chunked(e) for e in events]
    writes[-1] += b"0\r\n\r\n"
    return writes


class Pacer:
    """One timer per phase instead of one per stream: every ``gap / PHASES`` seconds the streams
    of the current phase each get their next event in one write. The upstream must keep the pace
    of 1,000 streams on its own core, or the wall times would measure it instead of the client."""

    def __init__(self, writes: list[bytes], gap: float) -> None:
        self.writes = writes
        self.gap = gap
        self.phases: list[dict[asyncio.StreamWriter, list[Any]]] = [{} for _ in range(PHASES)]
        self.joined = 0

    def add(self, writer: asyncio.StreamWriter) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.phases[self.joined % PHASES][writer] = [0, done]
        self.joined += 1
        return done

    async def run(self) -> None:
        tick = self.gap / PHASES
        phase = 0
        next_at = time.monotonic()
        last = len(self.writes)
        while True:
            for writer, state in list(self.phases[phase].items()):
                index, done = state
                if writer.is_closing():
                    del self.phases[phase][writer]
                    done.set_result(None)
                    continue
                writer.write(self.writes[index])
                state[0] = index + 1
                if index + 1 == last:
                    del self.phases[phase][writer]
                    done.set_result(None)
            phase = (phase + 1) % PHASES
            next_at += tick
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def serve(events: int, gap: float) -> None:
    pacer = Pacer(render_events(events), gap)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in request.decode("latin-1").split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                writer.write(head)
                await pacer.add(writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    raise_fd_limit()
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    pacing = asyncio.create_task(pacer.run())
    async with server:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    pacing.cancel()


# -- the contenders (each run in a fresh process) ------------------------------------------------

REQUEST = {"model": "live", "messages": [{"role": "user", "content": "go"}], "stream": True}


Mark = Callable[[], None]


def delta_text(data: str, pieces: list[str], mark: Mark) -> None:
    """Collect the event's text; ``mark()`` at the chat's first text."""
    empty = not pieces
    for choice in json.loads(data)["choices"]:
        content = choice["delta"].get("content")
        if content:
            pieces.append(content)
    if empty and pieces:
        mark()


async def raw_chat(host: str, port: int, mark: Mark) -> str:
    """The floor: the HTTP/1.1 chunked framing and the SSE lines by hand, json.loads per event."""
    reader, writer = await asyncio.open_connection(host, port)
    body = json.dumps(REQUEST).encode()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%s" % (host.encode(), len(body), body))
    await reader.readuntil(b"\r\n\r\n")
    pieces: list[str] = []
    buffer = b""
    try:
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            if size == 0:
                break
            buffer += (await reader.readexactly(size + 2))[:-2]
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    delta_text(line[6:].decode(), pieces, mark)
    finally:
        writer.close()
    return "".join(pieces)


async def httpx_chat(client: Any, base: str, mark: Mark) -> str:
    pieces: list[str] = []
    async with client.stream("POST", f"{base}/v1/chat/completions", json=REQUEST) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                delta_text(line[6:], pieces, mark)
    return "".join(pieces)


async def httpx_raw_chat(client: Any, base: str, mark: Mark) -> str:
    """httpx's raw bytes (no decoder, no line layer), the SSE lines split by hand."""
    pieces: list[str] = []
    buffer = b""
    async with client.stream("POST", f"{base}/v1/chat/completions", json=REQUEST) as response:
        async for data in response.aiter_raw():
            *lines, buffer = (buffer + data).split(b"\n")
            for line in lines:
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    delta_text(line[6:].decode(), pieces, mark)
    return "".join(pieces)


def httpx_client(transport: str, n: int) -> Any:
    import httpx

    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    if transport == "aiohttp":
        from httpx_aiohttp import AiohttpTransport  # type: ignore[import-not-found,unused-ignore]

        return httpx.AsyncClient(timeout=120, transport=AiohttpTransport(limits=limits))
    if transport == "think":
        from think_core.models._h1_transport import ThinkTransport
        from think_core.models._http import shared_ssl_context

        return httpx.AsyncClient(timeout=120, transport=ThinkTransport(verify=shared_ssl_context(), limits=limits))
    return httpx.AsyncClient(timeout=120, limits=limits)


class ChunkCounter:
    """The ``on_chunk`` observer of the plugins row: counts every chunk, and notes when each
    session's first one came (the row's only consumer of the stream, as ``on_event`` is bare think's)."""

    name = "live_counter"

    def __init__(self) -> None:
        self.chunks = 0
        self.first: dict[str, float] = {}

    @hookimpl
    def on_chunk(self, ctx: Any) -> None:
        self.chunks += 1
        if ctx.chunk.type == "text-delta":
            self.first.setdefault(ctx.session.id, time.perf_counter())


def think_agent(base: str, tmp: str, plugins: bool, counter: ChunkCounter) -> Any:
    from think_core import Think
    from think_core.models.openai import OpenAIChatModel

    model = OpenAIChatModel("live", base_url=f"{base}/v1", api_key="x")
    agent = Think(
        model,
        store=os.path.join(tmp, "think.db"),
        load_entrypoints=plugins,
        disable=["otel"],
        plugins=[counter] if plugins else [],
        settings={"analytics": {"path": os.path.join(tmp, "analytics.db")}},
    )
    return agent


async def run_contender(name: str, base: str, n: int, events: int, gap: float) -> dict[str, float]:
    """Warm up with one chat, then N at once; CPU and wall of the N, and how late the slowest
    chat got its first word and how far behind the model it ended."""
    host, port = base.removeprefix("http://").split(":")
    expected = expected_text(events)
    first: dict[int, float] = {}
    ended: dict[int, float] = {}

    def marker(i: int) -> Mark:
        def mark() -> None:
            first.setdefault(i, time.perf_counter())
        return mark

    with tempfile.TemporaryDirectory() as tmp:
        counter = ChunkCounter()
        closers: list[Callable[[], Awaitable[Any]]] = []
        talk: Callable[[int], Awaitable[str]]
        if name == "raw asyncio":
            async def talk(i: int) -> str:
                return await raw_chat(host, int(port), marker(i))
        elif name.startswith("httpx"):
            client = httpx_client(name.split()[0].partition("+")[2] or "h11", n)
            closers.append(client.aclose)
            read = httpx_raw_chat if name.endswith(" raw") else httpx_chat

            async def talk(i: int) -> str:
                return await read(client, base, marker(i))
        else:
            agent = think_agent(base, tmp, "plugins" in name, counter)
            closers.append(agent.aclose)

            observed = "plugins" in name

            async def talk(i: int) -> str:
                # One consumer of the stream each: the plugins row's on_chunk observer notes the
                # first word itself; bare think streams to an on_event callback.
                mark = marker(i)
                on_event = None if observed else (lambda chunk: mark() if chunk.get("type") == "text-delta" else None)
                result = await agent.session(f"chat-{i}").chat("go", on_event=on_event)
                assert result.status == "completed", result.error
                if observed:
                    first[i] = counter.first[f"chat-{i}"]
                return str(result.text)

        async def chat(i: int) -> str:
            text = await talk(i)
            ended[i] = time.perf_counter()
            return text

        assert await chat(-1) == expected
        counter.chunks = 0
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        texts = await asyncio.gather(*(chat(i) for i in range(n)))
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        assert all(text == expected for text in texts), "a chat lost text"
        if "plugins" in name:
            assert counter.chunks >= n * events, (counter.chunks, n * events)
        for close in closers:
            await close()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    span = (events - 1) * gap  # the model's own time from a chat's first event to its last
    return {"cpu": cpu, "wall": wall, "rss": after.ru_maxrss / 1024,
            "first": max(first[i] - started for i in range(n)),
            "behind": max(ended[i] - first[i] - span for i in range(n))}


def client_main(name: str, base: str, n: int, events: int, gap: float, profile: bool) -> None:
    raise_fd_limit()
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        result = profiler.runcall(asyncio.run, run_contender(name, base, n, events, gap))
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(40)
    else:
        result = asyncio.run(run_contender(name, base, n, events, gap))
    print(json.dumps(result), flush=True)


# -- the parent -----------------------------------------------------------------------------------

HTTPX_ONLY = " (h11)"
CONTENDERS = ["raw asyncio", "httpx", "httpx+aiohttp", "httpx+think", "httpx+think raw", "think", "think+plugins+observer",
              "think" + HTTPX_ONLY, "think+plugins+observer" + HTTPX_ONLY]


def available(name: str) -> bool:
    needs = {"httpx+aiohttp": "httpx_aiohttp", "httpx+think": "httptools"}.get(name.split()[0])
    return needs is None or importlib.util.find_spec(needs) is not None


class Upstream:
    def __init__(self, events: int, gap_ms: float) -> None:
        self.args = [sys.executable, __file__, "--serve", "--events", str(events), "--gap", str(gap_ms)]

    def __enter__(self) -> str:
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        return f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        self.proc.stdout.close()


def run_client(name: str, base: str, n: int, events: int, gap_ms: float, profile: bool) -> dict[str, float]:
    args = [sys.executable, __file__, "--client", name, "--url", base, "--n", str(n), "--events", str(events),
            "--gap", str(gap_ms)]
    env = dict(os.environ)
    if name.endswith(HTTPX_ONLY):  # think's clients over httpx's own transport, as before the fast extra
        env["THINK_HTTP_TRANSPORT"] = "httpx"
    out = subprocess.run(args + (["--profile-client"] if profile else []), check=True, stdout=subprocess.PIPE,
                         text=True, env=env).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def measure(sizes: list[int], contenders: list[str], events: int, gap_ms: float, rounds: int) -> list[list[object]]:
    rows: list[list[object]] = []
    ideal = events * gap_ms / 1000
    with Upstream(events, gap_ms) as base:
        for n in sizes:
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
            for _ in range(rounds):  # interleaved: a slow spell of the machine hits every contender
                for name in contenders:
                    runs[name].append(run_client(name, base, n, events, gap_ms, profile=False))
            floor = median([r["cpu"] for r in runs[contenders[0]]])
            floor_wall = median([r["wall"] for r in runs[contenders[0]]])
            for name in contenders:
                cpu = median([r["cpu"] for r in runs[name]])
                wall = median([r["wall"] for r in runs[name]])
                rows.append([f"{n:,}", name, cpu / (n * events) * 1e6, f"{cpu / floor:.2f}", wall,
                             f"{wall / ideal:.2f}", f"{wall / floor_wall:.2f}",
                             median([r["first"] for r in runs[name]]), median([r["behind"] for r in runs[name]]),
                             max(r["rss"] for r in runs[name])])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,500,1000", help="comma-separated numbers of concurrent chats")
    parser.add_argument("--events", type=int, default=300, help="text deltas per chat")
    parser.add_argument("--gap", type=float, default=20.0, help="ms between two events of one chat")
    parser.add_argument("--rounds", type=int, default=1, help="runs per contender and N (the median is shown)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--profile", default="", help="cProfile this contender once per N (to stderr)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", default="", help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--profile-client", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.events, args.gap / 1000))
        return
    if args.client:
        client_main(args.client, args.url, args.n, args.events, args.gap / 1000, args.profile_client)
        return
    os.environ.pop("THINK_PLUGINS", None)  # the bundled plugins come from entry points
    os.environ.pop("THINK_DISABLE_PLUGINS", None)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.profile:
        with Upstream(args.events, args.gap) as base:
            for n in sizes:
                run_client(args.profile, base, n, args.events, args.gap, profile=True)
        return
    contenders = [c for c in args.contenders.split(",") if c and available(c)]
    started = time.perf_counter()
    rows = measure(sizes, contenders, args.events, args.gap, args.rounds)
    print(f"live_streams — {machine()}")
    print(f"{args.events} events per chat, one per write, {args.gap:g} ms apart (ideal wall "
          f"{args.events * args.gap / 1000:.1f} s); median of {args.rounds} round(s)")
    print(table(["N chats", "client", "CPU µs/event", f"× {contenders[0]}", "wall s", "× ideal",
                 f"wall × {contenders[0]}", "last first word s", "most behind model s", "peak RSS MiB"], rows))
    print(f"(CPU = getrusage user+system of the client process, a fresh one per contender and N, from "
          f"the first request to the last answer; ratios from the same run; last first word = when the "
          f"slowest chat got its first text, from the first request; most behind model = the largest "
          f"(answer done - first text) - the model's {(args.events - 1) * args.gap / 1000:g} s between "
          f"its first and last event; total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
