"""think beside the agent frameworks users compare it with, on the same loopback streams.

Each framework streams through its own idiomatic API from the same OpenAI-compatible loopback
server (bench/stream_overhead.py's: a pre-rendered body in one write, so the server costs
nothing), in one process per framework together with the floor and think (on an
``httpx.AsyncClient`` as the peers' OpenAI clients are, on the HTTP client think makes itself,
and on the httpx client with a SQLite file), so every ratio comes from one run:

  stream   one turn of N text deltas; per-token overhead = (median − floor median) / N
  tools    T turns of: a step with two parallel tool calls, then a short answer;
           per-turn overhead = (median − floor median) / T
  import   seconds to import the framework in a fresh interpreter; RSS after one turn there

The floor reads the same bytes with httpx (lines, ``json.loads``, text and tool calls taken
out) and calls the tool functions itself. The peers are never think's dependencies: ``--setup
DIR`` makes one virtualenv per framework under DIR (their pins clash: Strands needs openai<3,
the OpenAI Agents SDK openai>=3) and installs the pinned versions there.

    python bench/peers.py --setup /tmp/think-peers     # once (needs PyPI)
    python bench/peers.py --venvs /tmp/think-peers     # N=10000, T=200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from _common import ROOT, machine, table
from stream_overhead import ServerProcess, _event, expected_text, serve, stream_route

PEERS: dict[str, list[str]] = {
    "pydantic-ai": ["pydantic-ai-slim[openai]==2.68.0"],
    "openai-agents": ["openai-agents==0.24.0"],
    "langchain": ["langchain==1.5.2", "langchain-openai==1.8.1"],
    "strands": ["strands-agents[openai]==1.62.0"],
}
MODULES = {"think": "think_core", "pydantic-ai": "pydantic_ai", "openai-agents": "agents",
           "langchain": "langchain.agents", "strands": "strands"}
CITIES = ("Paris", "London")


# -- the server: the text streams, and the tool-calling conversation -----------------------------

def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-tools", "object": "chat.completion.chunk", "created": 1700000000, "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def render_tool_calls() -> bytes:
    parts = [_event(_chunk({"role": "assistant", "content": None}))]
    for index, city in enumerate(CITIES):
        call = {"index": index, "id": f"call_{index}", "type": "function",
                "function": {"name": "get_weather", "arguments": ""}}
        parts.append(_event(_chunk({"tool_calls": [call]})))
        parts.append(_event(_chunk({"tool_calls": [{"index": index, "function": {
            "arguments": json.dumps({"city": city})}}]})))
    parts.append(_event(_chunk({}, "tool_calls")))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def render_answer() -> bytes:
    parts = [_event(_chunk({"role": "assistant", "content": ""}))]
    parts += [_event(_chunk({"content": piece})) for piece in ("Sunny", " in", " both", ".")]
    parts.append(_event(_chunk({}, "stop")))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


ANSWER = "Sunny in both."


def route(path: str, body: bytes, cache: dict[Any, bytes]) -> bytes:
    if not path.startswith("/tools/"):
        return stream_route(path, body, cache)
    messages = json.loads(body).get("messages", [])
    if any(m.get("role") == "tool" for m in messages):
        return cache.get("answer") or cache.setdefault("answer", render_answer())
    return cache.get("calls") or cache.setdefault("calls", render_tool_calls())


def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"Sunny in {city}"


async def get_weather_async(city: str) -> str:
    """Get the weather for a city."""
    return get_weather(city)


# -- one client per framework: (stream turn, tool turn) -----------------------------------------

Turn = Callable[[], Awaitable[str]]


def floor_clients(base: str, n: int, think_transport: bool = False) -> tuple[Turn, Turn, Callable[[], Awaitable[None]]]:
    """The floor: a bare ``httpx`` loop, ``json.loads`` per event, the tool called inline. With
    ``think_transport``, on an ``httpx.AsyncClient`` over think's own transport (as think's own
    client is built), so think's own overhead can be read on either transport."""
    if think_transport:
        from think_core.models._http import DEFAULT_TIMEOUT, shared_ssl_context
        from think_core.models._transport import new_client

        client = new_client(DEFAULT_TIMEOUT, shared_ssl_context())
    else:
        client = httpx.AsyncClient(timeout=60)

    async def step(path: str, messages: list[dict[str, Any]]) -> tuple[str, dict[int, dict[str, str]]]:
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        body = {"model": "bench", "messages": messages, "stream": True}
        async with client.stream("POST", f"{base}{path}/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for choice in json.loads(line[6:])["choices"]:
                    delta = choice["delta"]
                    if delta.get("content"):
                        text.append(delta["content"])
                    for call in delta.get("tool_calls") or ():
                        slot = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                        slot["id"] = call.get("id") or slot["id"]
                        slot["name"] += call.get("function", {}).get("name") or ""
                        slot["arguments"] += call.get("function", {}).get("arguments") or ""
        return "".join(text), calls

    async def stream() -> str:
        return (await step(f"/openai/{n}", [{"role": "user", "content": "go"}]))[0]

    async def tools() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris and London?"}]
        _, calls = await step("/tools", messages)
        messages.append({"role": "assistant", "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls.values()]})
        for c in calls.values():
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": get_weather(**json.loads(c["arguments"]))})
        return (await step("/tools", messages))[0]

    return stream, tools, client.aclose


def think_clients(base: str, n: int, on_disk: bool = False, own_client: bool = False,
                  async_tool: bool = False) -> tuple[Turn, Turn, Callable[[], Awaitable[None]]]:
    """think keeping its conversations in memory as the peers do (or in a SQLite file); with
    ``own_client``, on the HTTP client think makes itself (its own transport with the ``fast``
    extra; one client shared by the models, as ``Think(model="openai:...")`` builds them) instead
    of a plain ``httpx.AsyncClient`` like the floor's. With ``async_tool``, the tool written
    ``async def``: think runs it on the event loop, as the floor calls its tool inline (a plain
    ``def`` tool runs on a worker thread, which the floor does not pay for)."""
    from think_core import Think, tool
    from think_core.models import SharedClient
    from think_core.models.openai import OpenAIChatModel

    tmp = tempfile.mkdtemp(prefix="think-peers-")
    weather = tool(get_weather_async, name="get_weather") if async_tool else tool(get_weather)
    http = httpx.AsyncClient(timeout=60)  # one connection pool, as each peer's OpenAI client keeps
    stores = (os.path.join(tmp, "s.db"), os.path.join(tmp, "t.db")) if on_disk else (":memory:", ":memory:")
    own = SharedClient()
    client = own if own_client else http
    streamer = Think(OpenAIChatModel("bench", base_url=f"{base}/openai/{n}/v1", api_key="x", client=client),
                     store=stores[0], load_entrypoints=False)
    caller = Think(OpenAIChatModel("bench", base_url=f"{base}/tools/v1", api_key="x", client=client),
                   tools=[weather], store=stores[1], load_entrypoints=False)
    runs = [0]

    async def stream() -> str:
        runs[0] += 1
        pieces: list[str] = []
        await streamer.session(f"s{runs[0]}").chat("go", on_event=lambda chunk: pieces.append(chunk.get("delta", ""))
                                                   if chunk.get("type") == "text-delta" else None)
        return "".join(pieces)

    async def tools() -> str:
        runs[0] += 1
        return (await caller.session(f"t{runs[0]}").chat("Weather in Paris and London?")).text

    async def close() -> None:
        await streamer.aclose()
        await caller.aclose()
        await own.aclose()
        await http.aclose()

    return stream, tools, close


def pydantic_ai_clients(base: str, n: int) -> tuple[Turn, Turn, Callable[[], Awaitable[None]]]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    def model(path: str) -> Any:
        return OpenAIChatModel("bench", provider=OpenAIProvider(base_url=f"{base}{path}/v1", api_key="x"))

    streamer, caller = Agent(model(f"/openai/{n}")), Agent(model("/tools"), tools=[get_weather])

    async def run(agent: Any, prompt: str) -> str:
        pieces: list[str] = []
        async with agent.run_stream(prompt) as result:
            async for delta in result.stream_text(delta=True):
                pieces.append(delta)
        return "".join(pieces)

    async def close() -> None:
        return None

    return (lambda: run(streamer, "go")), (lambda: run(caller, "Weather in Paris and London?")), close


def openai_agents_clients(base: str, n: int) -> tuple[Turn, Turn, Callable[[], Awaitable[None]]]:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI
    from openai.types.responses import ResponseTextDeltaEvent

    set_tracing_disabled(True)

    def model(path: str) -> Any:
        return OpenAIChatCompletionsModel("bench", AsyncOpenAI(base_url=f"{base}{path}/v1", api_key="x"))

    streamer = Agent(name="bench", model=model(f"/openai/{n}"))
    caller = Agent(name="bench", model=model("/tools"), tools=[function_tool(get_weather)])

    async def run(agent: Any, prompt: str) -> str:
        pieces: list[str] = []
        result = Runner.run_streamed(agent, prompt)
        async for event in result.stream_events():
            if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
                pieces.append(event.data.delta)
        return "".join(pieces)

    async def close() -> None:
        return None

    return (lambda: run(streamer, "go")), (lambda: run(caller, "Weather in Paris and London?")), close


def langchain_clients(base: str, n: int) -> tuple[Turn, Turn, Callable[[], Awaitable[None]]]:
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    def model(path: str) -> Any:
        return ChatOpenAI(model="bench", base_url=f"{base}{path}/v1", api_key="x", streaming=True)  # type: ignore[arg-type]

    streamer = create_agent(model(f"/openai/{n}"), tools=[])
    caller = create_agent(model("/tools"), tools=[get_weather])

    async def run(agent: Any, prompt: str) -> str:
        pieces: list[str] = []
        async for token, _meta in agent.astream({"messages": [{"role": "user", "content": prompt}]},
                                                stream_mode="messages"):
            if getattr(token, "type", None) == "AIMessageChunk" and isinstance(token.content, str):
                pieces.append(token.content)
        return "".join(pieces)

    async def close() -> None:
        return None

    return (lambda: run(streamer, "go")), (lambda: run(caller, "Weather in Paris and London?")), close


def strands_clients(base: str, n: int) -> tuple[Turn, Turn, Callable[[], Awaitable[None]]]:
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    def model(path: str) -> Any:
        return OpenAIModel(client_args={"base_url": f"{base}{path}/v1", "api_key": "x"}, model_id="bench")

    weather = tool(get_weather)

    async def run(path: str, tools: list[Any], prompt: str) -> str:
        agent = Agent(model=model(path), tools=tools, callback_handler=None)  # a fresh history per turn
        pieces: list[str] = []
        async for event in agent.stream_async(prompt):
            if "data" in event:
                pieces.append(event["data"])
        return "".join(pieces)

    async def close() -> None:
        return None

    return (lambda: run(f"/openai/{n}", [], "go")), (lambda: run("/tools", [weather], "Weather in Paris and London?")), close


CLIENTS = {"floor": floor_clients, "think": think_clients,
           "think (SQLite file)": lambda base, n: think_clients(base, n, on_disk=True),
           "think (its own client)": lambda base, n: think_clients(base, n, own_client=True),
           "floor (think's transport)": lambda base, n: floor_clients(base, n, think_transport=True),
           "think (its own client, async def tool)": lambda base, n: think_clients(base, n, own_client=True,
                                                                               async_tool=True),
           "pydantic-ai": pydantic_ai_clients,
           "openai-agents": openai_agents_clients, "langchain": langchain_clients, "strands": strands_clients}


# -- measuring, in the framework's own virtualenv ----------------------------------------------

async def _measure(peer: str, base: str, n: int, turns: int, repeat: int) -> dict[str, Any]:
    names = ["floor", "think", "think (SQLite file)", "think (its own client)", peer]
    built = {name: CLIENTS[name](base, n) for name in names}
    expected = expected_text(n)
    times: dict[str, dict[str, list[float]]] = {name: {"stream": [], "tools": []} for name in names}
    for name, (stream, tools, _) in built.items():  # warm-up, and a check that each one streams it all
        text = await stream()
        assert text == expected, f"{name}: streamed {len(text)} of {len(expected)} characters"
        answer = await tools()
        assert answer.endswith(ANSWER), f"{name}: tool turn answered {answer!r}"
    for _ in range(repeat):
        for name, (stream, tools, _) in built.items():
            started = time.perf_counter()
            await stream()
            times[name]["stream"].append(time.perf_counter() - started)
            started = time.perf_counter()
            for _ in range(turns):
                await tools()
            times[name]["tools"].append(time.perf_counter() - started)
    for _, _, close in built.values():
        await close()
    return {name: {kind: statistics.median(values) for kind, values in kinds.items()} for name, kinds in times.items()}


def _footprint(peer: str, base: str, n: int) -> dict[str, float]:
    probe = f"import time; t = time.perf_counter(); import {MODULES[peer]}; print(time.perf_counter() - t)"
    imported = float(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                    check=True).stdout)
    stream, tools, close = CLIENTS[peer](base, n)

    async def once() -> None:
        await stream()
        await tools()
        await close()

    asyncio.run(once())
    import resource

    return {"import_s": imported, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _version(peer: str) -> str:
    from importlib.metadata import version

    dist = {"think": "think-agent", "pydantic-ai": "pydantic-ai-slim", "openai-agents": "openai-agents",
            "langchain": "langchain", "strands": "strands-agents"}[peer]
    return version(dist)


def _in_venv(python: str, *args: str) -> Any:
    done = subprocess.run([python, __file__, *args], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{python} {' '.join(args)}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def setup(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for peer, pins in PEERS.items():
        venv = root / peer
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        # think with the ``fast`` extra, as its own client (one row) runs best with it
        subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", *pins, f"{ROOT}[fast]"], check=True)
        print(f"{peer}: {venv}")


TOOL_CPU_ROWS = ["floor", "think", "think (SQLite file)", "floor (think's transport)", "think (its own client)",
                 "think (its own client, async def tool)"]


async def _tool_worker(name: str, base: str) -> None:
    """One contender of ``--tool-cpu`` in a process of its own, driven over stdin: ``cpu T`` runs T
    tool turns one after another and prints the CPU (``time.process_time``: this process with its
    tool threads) per turn; ``rate C`` runs C at once (each its own session) and prints turns/s."""
    _, tools, close = CLIENTS[name](base, 1)
    assert (await tools()).endswith(ANSWER), name
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print("ready", flush=True)
    while line := (await reader.readline()).decode().split():
        command, count = line[0], int(line[1])
        if command == "cpu":
            started = time.process_time()
            for _ in range(count):
                await tools()
            print((time.process_time() - started) / count, flush=True)
        else:
            started = time.perf_counter()
            await asyncio.gather(*(tools() for _ in range(count)))
            print(count / (time.perf_counter() - started), flush=True)
    await close()


class _Worker:
    """A ``--tool-worker`` process: one question at a time."""

    def __init__(self, name: str, base: str) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--tool-worker", name, "--base", base],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.ask(None) == "ready", name

    def ask(self, command: str | None) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer:
            raise RuntimeError(f"the worker for {command!r} ended (exit {self.proc.wait()})")
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _tool_cpu(base: str, turns: int, repeat: int, concurrency: int) -> dict[str, dict[str, float]]:
    """CPU per tool turn of the floor and of think in memory and on a SQLite file, and of the
    floor and think on think's own transport; then the rate of ``concurrency`` tool turns at once.
    Each contender runs in a process of its own, as an application holds one agent (in one shared
    process every collection of the garbage collector would walk all the others' sessions too);
    their rounds are interleaved, one contender running at a time, so a drift of the machine's
    speed falls on all of them alike."""
    workers = {name: _Worker(name, base) for name in TOOL_CPU_ROWS}
    cpu: dict[str, list[float]] = {name: [] for name in workers}
    rate: dict[str, list[float]] = {name: [] for name in workers}
    try:
        for _ in range(repeat):
            for name, worker in workers.items():
                cpu[name].append(float(worker.ask(f"cpu {turns}")))
            for name, worker in workers.items():
                rate[name].append(float(worker.ask(f"rate {concurrency}")))
    finally:
        for worker in workers.values():
            worker.close()
    return {name: {"cpu": statistics.median(cpu[name]), "rate": statistics.median(rate[name])} for name in workers}


def tool_cpu_report(turns: int, repeat: int, concurrency: int) -> None:
    with ServerProcess(__file__) as base:
        result = _tool_cpu(base, turns, repeat, concurrency)
    # Each row against the floor on the same transport: httpx's own, or think's.
    on_think_transport = {"floor (think's transport)", "think (its own client)", "think (its own client, async def tool)"}
    floors = {name: result["floor (think's transport)" if name in on_think_transport else "floor"] for name in result}
    rows = [[name, got["cpu"] * 1e3, (got["cpu"] - floors[name]["cpu"]) * 1e3, got["rate"],
             f"{got['rate'] / floors[name]['rate']:.2f}", f"{got['rate'] / result['floor']['rate']:.2f}"]
            for name, got in result.items()]
    print(f"peers --tool-cpu — {machine()}; {turns} tool turns × {repeat} rounds, then {concurrency} at once")
    print(table(["client", "CPU ms/tool turn", "over its floor ms", f"turns/s ({concurrency} at once)",
                 "× its floor's rate", "× httpx floor's rate"], rows))
    print("(its floor: the bare httpx loop on the same transport — httpx's own for the first three rows, "
          "think's for the last three; the floor calls its tool inline, as think runs an `async def` tool)")


def report(root: Path, n: int, turns: int, repeat: int) -> None:
    rows: list[list[object]] = []
    with ServerProcess(__file__) as base:
        think_python = str(root / "pydantic-ai" / "bin" / "python")
        footprints = {"think": _in_venv(think_python, "--footprint", "think", "--base", base, "--n", str(n))}
        for peer in PEERS:
            python = str(root / peer / "bin" / "python")
            result = _in_venv(python, "--peer", peer, "--base", base, "--n", str(n), "--turns", str(turns),
                              "--repeat", str(repeat))
            footprints[peer] = _in_venv(python, "--footprint", peer, "--base", base, "--n", str(n))
            floor = result["floor"]
            for name in ("think", "think (SQLite file)", "think (its own client)", peer) if not rows else (peer,):
                got = result[name]
                rows.append([
                    name, result["versions"][name],
                    (got["stream"] - floor["stream"]) / n * 1e6, f"{got['stream'] / floor['stream']:.2f}",
                    (got["tools"] - floor["tools"]) / turns * 1e3, f"{got['tools'] / floor['tools']:.2f}",
                    footprints[name.split(" ")[0]]["import_s"] * 1000, footprints[name.split(" ")[0]]["rss_mib"],
                ])
    print(f"peers — {machine()}; N={n:,} tokens, T={turns} tool turns, median of {repeat}")
    print(table(["framework", "version", "µs/token over floor", "stream ×floor", "ms/tool turn over floor",
                 "tools ×floor", "import ms", "RSS MiB"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", type=Path, help="make the frameworks' virtualenvs under this directory")
    parser.add_argument("--venvs", type=Path, help="run against the virtualenvs made by --setup")
    parser.add_argument("--n", type=int, default=10_000, help="tokens in the streaming turn")
    parser.add_argument("--turns", type=int, default=200, help="tool-calling turns per run")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tool-cpu", action="store_true",
                        help="only think and the floor, in this process: CPU per tool turn, and the rate of --concurrency at once")
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    parser.add_argument("--tool-worker", help=argparse.SUPPRESS)
    parser.add_argument("--footprint", help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(route))
    elif args.tool_worker:
        asyncio.run(_tool_worker(args.tool_worker, args.base))
    elif args.tool_cpu:
        tool_cpu_report(args.turns, args.repeat, args.concurrency)
    elif args.setup:
        setup(args.setup)
    elif args.peer:
        result = asyncio.run(_measure(args.peer, args.base, args.n, args.turns, args.repeat))
        result["versions"] = {name: _version(name) for name in ("think", args.peer)}
        for row in ("think (SQLite file)", "think (its own client)"):
            result["versions"][row] = result["versions"]["think"]
        print(json.dumps(result))
    elif args.footprint:
        print(json.dumps(_footprint(args.footprint, args.base, args.n)))
    elif args.venvs:
        report(args.venvs, args.n, args.turns, args.repeat)
    else:
        parser.error("--setup DIR once, then --venvs DIR")


if __name__ == "__main__":
    main()
