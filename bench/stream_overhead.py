"""What does think cost per streamed token, over a real socket?

A loopback server (a separate process, so its work is not on the client's event loop) answers
with N text chunks as a Chat Completions or an Anthropic Messages event stream, pre-rendered
and sent in one write: the server costs nothing, so the floor is only the client's own work.
Three clients read the same bytes:

  a  floor    httpx.AsyncClient streaming, iterate lines, json.loads each data payload,
              extract the delta text, join it
  b  think    Think(OpenAIChatModel(...), load_entrypoints=False): a full turn — events,
              the assistant message builder, persisted to a SQLite file
  c  think+4  as b, with the four bundled entry-point plugins loaded (analytics writing to a
              temp SQLite file) and a recording on_chunk plugin (appends chunk.type)
  d  redact   as b, with the bundled ``redact`` plugin rewriting the stream (a phone-number
              pattern: the text has none, so every token is searched and let through) — the
              cost of a stream transform per token

Each variant runs several times, interleaved (fresh session each run); the table shows min and
median wall time, median CPU time of this (client) process, µs per chunk, the ratios b/a and
c/a of the minima, of the medians, and the median of the per-round ratios (each round runs
a, b and c back to back, so a slow spell of the machine hits all three; all from the same
run), and the peak
of Python allocations during one extra, untimed run of each variant (tracemalloc; by default
only for N <= 10k, because tracing makes a run ~7x slower: ``--memory-max 100000`` for all).

    python bench/stream_overhead.py                  # N = 1k, 10k, 100k
    python bench/stream_overhead.py --sizes 1000,10000 --repeat 9
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import string
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from _common import machine, median, peak_rss_mib, table

from think_core import hookimpl

# -- the server (run in a child process) --------------------------------------------------------

# Tokens as a model writes them: mostly words, now and then a newline or a quote (escaped in
# JSON, so those events take the full parse), and non-ASCII text.
_TOKENS = ["The", " answer", " is", " forty", "-two", ".", "\n\n", "It", " said", ' "hi"', " to",
           " the", " café", " and", " left", "."]


def expected_text(n: int) -> str:
    return "".join(_TOKENS[i % len(_TOKENS)] for i in range(n))


def _event(payload: dict[str, Any], event: str | None = None) -> bytes:
    head = b"event: %s\n" % event.encode() if event else b""
    return head + b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def render_openai(n: int, padded: bool = False) -> bytes:
    """A Chat Completions stream with ``n`` content deltas; ``padded``: each chunk ends with a
    random ``obfuscation`` string, as api.openai.com sends them today."""
    padding = random.Random(n)

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        body = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
                "model": "bench", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        if padded:
            body["obfuscation"] = "".join(padding.choices(string.ascii_letters + string.digits,
                                                          k=padding.randrange(1, 12)))
        return body

    parts = [_event(chunk({"role": "assistant", "content": ""}))]
    parts.extend(_event(chunk({"content": _TOKENS[i % len(_TOKENS)]})) for i in range(n))
    parts.append(_event(chunk({}, "stop")))
    usage = chunk({}, usage={"prompt_tokens": 10, "completion_tokens": n, "total_tokens": n + 10})
    usage["choices"] = []
    parts.append(_event(usage))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def render_anthropic(n: int) -> bytes:
    """An Anthropic Messages stream with ``n`` text deltas."""
    def ev(payload: dict[str, Any]) -> bytes:
        return _event(payload, payload["type"])

    parts = [
        ev({"type": "message_start", "message": {"id": "msg_bench", "type": "message", "role": "assistant",
                                                 "model": "bench", "content": [], "stop_reason": None,
                                                 "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ]
    parts.extend(ev({"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": _TOKENS[i % len(_TOKENS)]}}) for i in range(n))
    parts.append(ev({"type": "content_block_stop", "index": 0}))
    parts.append(ev({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                     "usage": {"output_tokens": n}}))
    parts.append(ev({"type": "message_stop"}))
    return b"".join(parts)


RENDER = {"openai": render_openai, "anthropic": render_anthropic,
          "openai-padded": lambda n: render_openai(n, padded=True)}


def stream_route(path: str, body: bytes, cache: dict[Any, bytes]) -> bytes:
    """``/<shape>/<N>/v1/...``: the pre-rendered stream of that shape with N text deltas."""
    _, shape, n_text, *_ = path.split("/")
    key = (shape, int(n_text))
    return cache.get(key) or cache.setdefault(key, RENDER[shape](key[1]))


async def serve(route: Callable[[str, bytes, dict[Any, bytes]], bytes]) -> None:
    """A loopback HTTP/1.1 server answering every POST with ``route(path, body, cache)``."""
    cache: dict[Any, bytes] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = route(path, await reader.readexactly(length), cache)
                # The whole pre-rendered body in one write: the server costs nothing, so the
                # floor is only the client's own work (reading lines, parsing JSON).
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin


class ServerProcess:
    """``script --serve`` in a child process (its work stays off the client's event loop)."""

    def __init__(self, script: str = __file__) -> None:
        self.script = script

    def __enter__(self) -> str:
        self.proc = subprocess.Popen([sys.executable, self.script, "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        port = int(self.proc.stdout.readline())
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(10)
        self.proc.stdout.close()


# -- the three clients --------------------------------------------------------------------------

async def floor_turn(client: httpx.AsyncClient, base: str, shape: str, n: int) -> str:
    """Only the client's own work: read the lines, ``json.loads`` each event, take its text."""
    pieces: list[str] = []
    if shape.startswith("openai"):
        body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "stream": True}
        async with client.stream("POST", f"{base}/openai/{n}/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                for choice in chunk["choices"]:
                    content = choice["delta"].get("content")
                    if content:
                        pieces.append(content)
        return "".join(pieces)
    body = {"model": "bench", "max_tokens": 1024, "messages": [{"role": "user", "content": "go"}], "stream": True}
    async with client.stream("POST", f"{base}/anthropic/{n}/v1/messages", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta":
                pieces.append(event["delta"]["text"])
            elif event["type"] == "message_stop":
                break
    return "".join(pieces)


class ChunkRecorder:
    name = "bench_recorder"

    def __init__(self) -> None:
        self.types: list[str] = []

    @hookimpl
    def on_chunk(self, ctx: Any) -> None:
        self.types.append(ctx.chunk.type)


class ThinkVariant:
    """One agent reused across runs; each run is a new session (so history stays empty)."""

    def __init__(
        self, client: httpx.AsyncClient, base: str, shape: str, n: int, tmp: str, plugins: bool, redact: bool = False
    ) -> None:
        from think_core import Think
        from think_core.models.anthropic import AnthropicModel
        from think_core.models.openai import OpenAIChatModel

        self.n = n
        self.runs = 0
        self.recorder = ChunkRecorder() if plugins else None
        model: Any
        if shape.startswith("openai"):
            model = OpenAIChatModel("bench", base_url=f"{base}/openai/{n}/v1", api_key="x", client=client)
        else:
            model = AnthropicModel("bench", base_url=f"{base}/anthropic/{n}", api_key="x", client=client)
        tag = f"{shape}-{'plugins' if plugins else 'redact' if redact else 'bare'}"
        extra: list[Any] = [self.recorder] if self.recorder else []
        if redact:
            from think_plugins.redact import Redact

            extra.append(Redact({"patterns": [r"\d{3}-\d{4}"]}))
        self.agent = Think(
            model,
            store=os.path.join(tmp, f"think-{tag}-{n}.db"),
            load_entrypoints=plugins,
            # The four plugins the figures have always been measured with; otel adds no
            # per-chunk work (it has no on_chunk) and stays out so runs stay comparable.
            disable=["otel", "redact", "fallback", "budget"],
            plugins=extra,
            settings={"analytics": {"path": os.path.join(tmp, f"analytics-{shape}-{n}.db")}},
        )
        if plugins:
            loaded = {i.name for i in self.agent.plugin_manager.plugin_infos if i.status == "loaded"}
            expected = {"readonly_guard", "tool_cache", "analytics", "overflow_classifier", "bench_recorder"}
            assert loaded == expected, loaded

    async def __call__(self) -> str:
        self.runs += 1
        if self.recorder:
            self.recorder.types.clear()
        result = await self.agent.session(f"run-{self.runs}").chat("go")
        assert result.status == "completed", result.error
        if self.recorder:
            assert len(self.recorder.types) == self.n and self.recorder.types[0] == "text-delta"
        return result.text

    async def aclose(self) -> None:
        await self.agent.aclose()  # also closes the plugins (analytics flushes its sink)


# -- measuring ----------------------------------------------------------------------------------

async def timed(fn: Callable[[], Awaitable[str]], expected: str) -> tuple[float, float]:
    """One run: (wall seconds, CPU seconds of this process)."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    text = await fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert text == expected, (len(text), len(expected))
    return wall, cpu


async def peak_alloc(fn: Callable[[], Awaitable[str]]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        await fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


async def measure(base: str, shapes: list[str], sizes: list[int], repeat: int, memory_max: int) -> list[list[object]]:
    rows: list[list[object]] = []
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        with tempfile.TemporaryDirectory() as tmp:
            for shape in shapes:
                for n in sizes:
                    rows += await measure_one(client, base, tmp, shape, n, repeat, memory_max)
    return rows


async def measure_one(
    client: httpx.AsyncClient, base: str, tmp: str, shape: str, n: int, repeat: int, memory_max: int
) -> list[list[object]]:
    expected = expected_text(n)
    reps = repeat if n <= 10_000 else min(repeat, 7)
    bare = ThinkVariant(client, base, shape, n, tmp, plugins=False)
    full = ThinkVariant(client, base, shape, n, tmp, plugins=True)
    redacting = ThinkVariant(client, base, shape, n, tmp, plugins=False, redact=True)
    variants: dict[str, Callable[[], Awaitable[str]]] = {
        "a floor": lambda: floor_turn(client, base, shape, n),
        "b think": bare,
        "c think+4 plugins+on_chunk": full,
        "d think+redact": redacting,
    }
    for fn in variants.values():  # warm-up: connection, imports, caches, SQLite pages
        await fn()
    # Interleave the variants so drift (thermal, other load) hits them alike.
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(reps):
        for name, fn in variants.items():
            runs[name].append(await timed(fn, expected))
    traced = n <= memory_max
    peaks = {name: (await peak_alloc(fn) if traced else "-") for name, fn in variants.items()}
    await bare.aclose()
    await full.aclose()
    await redacting.aclose()
    floor = [w for w, _ in runs["a floor"]]
    rows: list[list[object]] = []
    for name, pairs in runs.items():
        wall, cpu = [w for w, _ in pairs], [c for _, c in pairs]
        paired = median([w / f for w, f in zip(wall, floor, strict=True)])
        rows.append([
            shape, f"{n:,}", name, reps, min(wall) * 1000, median(wall) * 1000, median(cpu) * 1000,
            median(wall) / n * 1e6, f"{min(wall) / min(floor):.2f}",
            f"{median(wall) / median(floor):.2f}", f"{paired:.2f}", peaks[name],
        ])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated chunk counts")
    parser.add_argument("--shapes", default="openai,anthropic",
                        help="stream shapes: openai, anthropic, openai-padded (with OpenAI's obfuscation field)")
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per variant (at most 7 for N > 10k)")
    parser.add_argument("--memory-max", type=int, default=10_000,
                        help="trace allocations only for N up to this (tracemalloc makes a run ~7x slower)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(stream_route))
        return
    os.environ.pop("THINK_PLUGINS", None)  # the bundled plugins come from entry points
    os.environ.pop("THINK_DISABLE_PLUGINS", None)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    started = time.perf_counter()
    with ServerProcess() as base:
        rows = asyncio.run(measure(base, args.shapes.split(","), sizes, args.repeat, args.memory_max))
    print(f"stream_overhead — {machine()}")
    print(table(["shape", "N chunks", "variant", "runs", "min ms", "median ms", "CPU median ms",
                 "µs/chunk", "ratio/a (min)", "ratio/a (median)", "ratio/a (paired)", "peak alloc MiB"], rows))
    print(f"(wall times; µs/chunk from the median; ratios against variant a at the same N, same run "
          f"(paired: the median of each round's ratio); "
          f"CPU = process time of this client process; peak RSS of this process "
          f"{peak_rss_mib():.0f} MiB; total {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
