"""MCP tools (think_core.mcp) against a real MCP server process: tests/mcp_server.py, over stdio
and over streamable HTTP, driven by turns of the scripted model."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.support.agents import make_agent
from tests.support.provider_files import PNG, PNG_URL
from think_core import ConfigurationError, PluginError, hookimpl, tool  # noqa: E402
from think_core.agent import Think  # noqa: E402
from think_core.cli.config import load_config  # noqa: E402
from think_core.mcp import MCPServer, MCPServerError, MCPTool, MissingMCPExtra  # noqa: E402
from think_core.models.base import ToolMessage  # noqa: E402
from think_core.models.content import FilePart, TextPart  # noqa: E402
from think_core.models.scripted import ScriptedModel, Step, call  # noqa: E402
from think_plugins.caching import ToolCache  # noqa: E402
from think_plugins.readonly import ReadOnlyGuard  # noqa: E402

SERVER = str(Path(__file__).resolve().parents[1] / "mcp_server.py")
DEADLINE = 60.0  # generous: CI is a busy 2-core box; a passing test takes a fraction of it


# -- servers ---------------------------------------------------------------------------------------
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for_port(port: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the HTTP MCP server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the HTTP MCP server did not listen on {port} within {DEADLINE} s")


@contextmanager
def _http_server_process(port: int = 0) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """tests/mcp_server.py serving streamable HTTP on a loopback port (a free one by default)."""
    proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.strip().isdigit():
            raise RuntimeError(f"the HTTP MCP server did not print its port: {line!r}")
        _wait_for_port(int(line), proc)
        yield f"http://127.0.0.1:{int(line)}/mcp", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture(scope="module")
def shared_http_url() -> Iterator[str]:
    """One HTTP server for the tests that do not stop it (they look up keys of their own)."""
    with _http_server_process() as (url, _):
        yield url


@pytest.fixture
def http_server() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """An HTTP server of the test's own, to kill."""
    with _http_server_process() as server:
        yield server


@pytest.fixture(params=["stdio", "http"])
def make_server(request: pytest.FixtureRequest) -> Callable[..., MCPServer]:
    """An MCPServer for tests/mcp_server.py over either transport (over stdio, every MCPServer
    starts a server process of its own)."""
    if request.param == "stdio":
        return lambda **options: MCPServer.stdio(sys.executable, [SERVER], **options)
    url = request.getfixturevalue("shared_http_url")
    return lambda **options: MCPServer.http(url, **options)


@pytest.fixture(autouse=True)
async def _close_agents() -> AsyncIterator[None]:
    """MCP servers are child processes and connections: agents here close with ``aclose``."""
    yield
    await make_agent.aclose()


def mcp_agent(steps: list[Any], *servers_and_tools: Any, plugins: tuple[Any, ...] = (), **kwargs: Any) -> Think:
    return make_agent(ScriptedModel(steps), tools=servers_and_tools, plugins=plugins, **kwargs)


def results(agent: Think) -> dict[str, ToolMessage]:
    """The tool results the model saw in its last request, by tool name."""
    return {m.tool_name: m for m in last_request(agent).messages if isinstance(m, ToolMessage)}


def last_request(agent: Think) -> Any:
    assert isinstance(agent.model, ScriptedModel)
    return agent.model.requests[-1]


# -- the tools of a server ------------------------------------------------------------------------
async def test_the_servers_tools_join_the_agents_tools_with_schemas_and_annotations(make_server) -> None:
    @tool(read_only=True)
    def local() -> str:
        """An ordinary tool beside the server's."""
        return "local"

    agent = mcp_agent([], make_server(), local)
    assert list(agent.tools) == ["local"]  # the server opens with the first session
    await agent.session("s").open()

    assert {"local", "lookup", "delete_key", "set_key", "fail", "pid", "sleep"} <= set(agent.tools)
    lookup, delete, put = agent.tools["lookup"], agent.tools["delete_key"], agent.tools["set_key"]
    assert isinstance(lookup, MCPTool) and lookup.description == "Look up a key."
    assert lookup.parameters["properties"]["key"]["type"] == "string"
    assert lookup.parameters["required"] == ["key"]
    assert (lookup.read_only, lookup.annotations.destructive, lookup.annotations.idempotent) == (True, False, False)
    assert (delete.read_only, delete.annotations.destructive) == (False, True)
    assert (put.read_only, put.annotations.destructive, put.annotations.idempotent) == (False, False, True)
    # MCP's defaults for a tool without hints: not read-only, destructive.
    assert (agent.tools["sleep"].read_only, agent.tools["sleep"].annotations.destructive) == (False, True)


async def test_a_turn_calls_the_servers_tools(make_server) -> None:
    steps = [Step(tool_calls=[call("lookup", {"key": "turn"}), call("set_key", {"key": "turn-size", "value": "L"})]), "done"]
    agent = mcp_agent(steps, make_server())
    result = await agent.session("s").chat("what colour?")

    assert result.status == "completed" and result.text == "done"
    seen = results(agent)
    assert seen["lookup"].is_error is False
    assert seen["lookup"].output == {"result": "turn=blue (lookup #1)"}
    assert seen["set_key"].output == {"result": "turn-size=L"}


async def test_a_tool_error_reaches_the_model_as_an_error_result(make_server) -> None:
    calls = [call("fail", {"reason": "no disk"}, id="fail"), call("lookup", {"key": 3}, id="invalid"),
             call("lookup", {}, id="missing")]
    agent = mcp_agent([Step(tool_calls=calls), "done"], make_server())
    result = await agent.session("s").chat("go")

    assert result.status == "completed"
    seen = {m.tool_call_id: m for m in last_request(agent).messages if isinstance(m, ToolMessage)}
    assert seen["fail"].is_error is True
    assert seen["fail"].output.startswith("MCPToolError: ") and "cannot do it: no disk" in seen["fail"].output
    assert seen["invalid"].is_error is True and "valid string" in seen["invalid"].output  # the server's validation
    assert seen["missing"].is_error is True and "missing key" in seen["missing"].output  # checked before the call


async def test_the_read_only_guard_blocks_the_destructive_tool(make_server) -> None:
    server = make_server()
    steps = [Step(tool_calls=[call("delete_key", {"key": "guard"}), call("lookup", {"key": "guard"})]), "done"]
    agent = mcp_agent(steps, server, plugins=(ReadOnlyGuard(),), settings={"readonly_guard": {"enabled": True}})
    await agent.session("s").open()
    await server.call_tool("set_key", {"key": "guard", "value": "red"})
    result = await agent.session("s").chat("delete it")

    assert result.status == "completed"
    blocked = results(agent)["delete_key"].output
    assert blocked.startswith('Tool "delete_key" was blocked: this session is in read-only mode')
    assert "lookup" in blocked  # the read-only MCP tools are listed as usable
    assert results(agent)["lookup"].output == {"result": "guard=red (lookup #1)"}
    # The server never ran the deletion.
    assert await server.call_tool("lookup", {"key": "guard"}) == {"result": "guard=red (lookup #2)"}


async def test_the_cache_serves_the_read_only_tool_the_second_time(make_server) -> None:
    server = make_server()
    lookup = Step(tool_calls=[call("lookup", {"key": "cache"})])
    agent = mcp_agent([lookup, "first", lookup, "second"], server, plugins=(ToolCache(),))
    session = agent.session("s")
    await session.chat("what colour?")
    first = results(agent)["lookup"].output
    await session.chat("and again?")

    assert results(agent)["lookup"].output == first == {"result": "cache=blue (lookup #1)"}
    assert (await server.call_tool("stats", {}))["cache"] == 1  # the server's own count


# -- failures --------------------------------------------------------------------------------------
class CallStarted:
    """Sets ``event`` when a tool call is about to run."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    @hookimpl
    def before_tool_call(self, ctx: Any) -> None:
        self.event.set()


async def _kill_during_the_call(agent: Think, started: CallStarted, pid: int) -> Any:
    turn = asyncio.create_task(agent.session("s").chat("wait"))
    await asyncio.wait_for(started.event.wait(), DEADLINE)
    await asyncio.sleep(0.5)  # the request reaches the server
    os.kill(pid, signal.SIGKILL)
    began = time.monotonic()
    result = await asyncio.wait_for(turn, DEADLINE)
    return result, time.monotonic() - began


async def test_a_stdio_server_killed_mid_call_is_a_clear_error_and_is_started_again() -> None:
    server = MCPServer.stdio(sys.executable, [SERVER], max_restarts=1)
    started = CallStarted()
    steps = [Step(tool_calls=[call("sleep", {"seconds": 120})]), "after", Step(tool_calls=[call("pid", {})]), "done"]
    agent = mcp_agent(steps, server, plugins=(started,))
    await agent.session("s").open()
    pid = (await server.call_tool("pid", {}))["result"]

    result, took = await _kill_during_the_call(agent, started, pid)
    assert result.status == "completed" and took < 15
    error = results(agent)["sleep"]
    assert error.is_error is True
    assert "MCPServerError: MCP server 'mcp_server' stopped during the call of 'sleep'" in error.output
    assert "may or may not have taken effect" in error.output

    await agent.session("s").chat("again")
    new_pid = results(agent)["pid"].output["result"]
    assert new_pid != pid and server.restarts == 1

    # A server that keeps dying is not started forever: after max_restarts, calls say so.
    os.kill(new_pid, signal.SIGKILL)
    with pytest.raises(MCPServerError, match="stopped during the call of 'pid'"):
        await asyncio.wait_for(server.call_tool("pid", {}), DEADLINE)
    with pytest.raises(MCPServerError, match=r"started again 1 time\(s\) already, so it is not started again any more"):
        await server.call_tool("pid", {})


async def test_a_read_only_call_is_repeated_on_a_restarted_server() -> None:
    server = MCPServer.stdio(sys.executable, [SERVER])
    agent = mcp_agent([Step(tool_calls=[call("lookup", {"key": "colour"})]), "done"], server)
    await agent.session("s").open()
    pid = (await server.call_tool("pid", {}))["result"]
    os.kill(pid, signal.SIGKILL)
    while _pid_alive(pid):
        await asyncio.sleep(0.05)

    await agent.session("s").chat("colour?")
    assert results(agent)["lookup"].output == {"result": "colour=blue (lookup #1)"}  # a new server's counter
    assert server.restarts == 1


async def test_an_http_server_killed_mid_call_is_a_clear_error(http_server) -> None:
    url, proc = http_server
    started = CallStarted()
    steps = [Step(tool_calls=[call("sleep", {"seconds": 120})]), "after", Step(tool_calls=[call("lookup", {"key": "a"})]), "done"]
    agent = mcp_agent(steps, MCPServer.http(url), plugins=(started,))

    result, took = await _kill_during_the_call(agent, started, proc.pid)
    assert result.status == "completed" and took < 15
    error = results(agent)["sleep"]
    assert error.is_error is True and "MCPServerError: MCP server '127.0.0.1:" in error.output
    assert "stopped during the call of 'sleep'" in error.output and "the next call connects again" in error.output

    # Nobody can start an HTTP server again: the next call says why it failed, quickly.
    began = time.monotonic()
    await agent.session("s").chat("again")
    assert time.monotonic() - began < 15
    assert results(agent)["lookup"].is_error is True
    assert "MCPServerError: MCP server '127.0.0.1:" in results(agent)["lookup"].output
    assert "could not be reached: ConnectError" in results(agent)["lookup"].output


async def test_an_http_server_that_restarted_and_forgot_the_session_is_connected_to_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import mcp

    from think_core.mcp import connection

    # Servers of the protocol versions before 2026-07-28 keep a session per client and forget it
    # when they restart; the SDK's client speaks those versions in its "legacy" mode.
    monkeypatch.setattr(connection, "Client", functools.partial(mcp.Client, mode="legacy"))
    with _http_server_process() as (url, proc):
        server = MCPServer.http(url)
        try:
            await server.open()
            assert await server.call_tool("set_key", {"key": "session", "value": "red"}) == {"result": "session=red"}
            proc.terminate()
            proc.wait(timeout=DEADLINE)
            with _http_server_process(int(url.rsplit(":", 1)[1].split("/")[0])):
                # The refused call never ran, so even a destructive one is sent again.
                assert await server.call_tool("delete_key", {"key": "session"}) == {"result": "deleted session"}
                assert server.restarts == 1
        finally:
            await server.aclose()


async def test_a_call_that_takes_too_long_is_an_error_and_the_server_stays_usable(make_server) -> None:
    steps = [Step(tool_calls=[call("sleep", {"seconds": 60})]), "late", Step(tool_calls=[call("lookup", {"key": "slow"})]), "done"]
    agent = mcp_agent(steps, make_server(timeout=1.0))
    began = time.monotonic()
    await agent.session("s").chat("wait")
    assert time.monotonic() - began < 15
    assert "did not answer the call of 'sleep' within 1 s" in results(agent)["sleep"].output

    await agent.session("s").chat("colour?")
    assert results(agent)["lookup"].output == {"result": "slow=blue (lookup #1)"}


async def test_cancelling_a_turn_cancels_its_call_and_the_server_stays_usable(make_server) -> None:
    started = CallStarted()
    # The aborted turn plays only its first step; the next turn plays the rest.
    steps = [Step(tool_calls=[call("sleep", {"seconds": 120})]), Step(tool_calls=[call("lookup", {"key": "cancel"})]), "done"]
    agent = mcp_agent(steps, make_server(), plugins=(started,))
    session = agent.session("s")
    turn = asyncio.create_task(session.chat("wait", request_id="slow"))
    await asyncio.wait_for(started.event.wait(), DEADLINE)
    assert session.cancel("slow")
    assert (await asyncio.wait_for(turn, DEADLINE)).status == "aborted"

    await session.chat("colour?")
    assert results(agent)["lookup"].output == {"result": "cancel=blue (lookup #1)"}


async def test_a_server_that_cannot_start_fails_opening_the_session_clearly() -> None:
    server = MCPServer.stdio(sys.executable, ["-c", "import sys; sys.exit(3)"], name="broken")
    agent = mcp_agent(["unused"], server)
    with pytest.raises(PluginError) as caught:
        await asyncio.wait_for(agent.session("s").open(), DEADLINE)
    assert "MCP server 'broken' failed to start: the server closed the connection" in str(caught.value)

    missing = MCPServer.stdio("/nonexistent/mcp-server", name="missing")
    with pytest.raises(MCPServerError, match="'missing' failed to start: FileNotFoundError"):
        await missing.open()


async def test_aclose_leaves_no_child_process() -> None:
    server = MCPServer.stdio(sys.executable, [SERVER])
    agent = mcp_agent([], server)
    await agent.session("s").open()
    pid = (await server.call_tool("pid", {}))["result"]
    assert _pid_alive(pid)

    await agent.aclose()
    make_agent.built.remove(agent)
    deadline = time.monotonic() + DEADLINE
    while _pid_alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not _pid_alive(pid)


# -- names, configuration, the extra -----------------------------------------------------------------
async def test_a_name_taken_by_another_tool_needs_a_prefix(shared_http_url: str) -> None:
    @tool(read_only=True)
    def lookup(key: str) -> str:
        """A local lookup."""
        return key

    agent = mcp_agent([], MCPServer.http(shared_http_url), lookup)
    with pytest.raises(PluginError, match="give the server a prefix"):
        await agent.session("s").open()

    steps = [Step(tool_calls=[call("kv_lookup", {"key": "prefix"}), call("lookup", {"key": "x"})]), "done"]
    agent = mcp_agent(steps, MCPServer.http(shared_http_url, prefix="kv"), lookup)
    await agent.session("s").chat("go")
    assert results(agent)["kv_lookup"].output == {"result": "prefix=blue (lookup #1)"}
    assert results(agent)["lookup"].output == "x"


async def test_http_headers_go_with_every_request(shared_http_url: str) -> None:
    server = MCPServer.http(shared_http_url, headers={"X-Think-Test": "yes"})
    try:
        await server.open()
        assert await server.call_tool("header", {"name": "x-think-test"}) == {"result": "yes"}
    finally:
        await server.aclose()


def test_think_toml_declares_servers(tmp_path: Path) -> None:
    path = tmp_path / "think.toml"
    path.write_text(
        '[mcp.servers.kv]\ncommand = "python"\nargs = ["server.py"]\nenv = { A = "1" }\nprefix = "kv"\n\n'
        '[mcp.servers.remote]\nurl = "http://127.0.0.1:9/mcp"\nheaders = { Authorization = "Bearer x" }\ntimeout = 5\n'
    )
    kv, remote = load_config(str(path)).mcp.build()
    assert (kv.name, kv.prefix, repr(kv)) == ("kv", "kv", "<MCPServer 'kv' stdio: python server.py>")
    assert (remote.name, remote.timeout, repr(remote)) == ("remote", 5.0, "<MCPServer 'remote' http: http://127.0.0.1:9/mcp>")

    for bad in ('command = "x"\nurl = "http://h/mcp"', 'args = ["a"]', 'url = "http://h/mcp"\nargs = ["a"]',
                'command = "x"\nheaders = { A = "b" }', 'command = "x"\nspeed = 3'):
        path.write_text(f"[mcp.servers.bad]\n{bad}\n")
        with pytest.raises(ConfigurationError, match="mcp.servers.bad"):
            load_config(str(path))


def test_think_toml_servers_reach_the_cli_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from think_core.cli.common import add_agent_arguments, resolve_agent_options

    (tmp_path / "think.toml").write_text(f'[mcp.servers.kv]\ncommand = "{sys.executable}"\nargs = ["{SERVER}"]\n')
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    _, kwargs = resolve_agent_options(parser.parse_args(["--model", "demo"]))
    assert [s.name for s in kwargs["tools"]] == ["kv"]


def test_the_engine_does_not_import_the_sdk() -> None:
    code = "import sys, think_core, think_core.mcp; from think_core.agent import Think; print('mcp' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=DEADLINE)
    assert out.stdout.strip() == "False", out.stderr


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else find_spec(name, *a))
    with pytest.raises(MissingMCPExtra, match=r"pip install 'think-agent\[mcp\]'"):
        MCPServer.stdio("x")


def test_the_example_runs() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "mcp" / "run.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, env=env, timeout=DEADLINE)
    assert out.returncode == 0, out.stderr
    assert "read_note({'title': 'groceries'}) -> {'result': 'eggs, milk, bread'}" in out.stdout
    assert 'delete_note({\'title\': \'groceries\'}) -> Tool "delete_note" was blocked' in out.stdout


# -- files -------------------------------------------------------------------------------------------
async def test_an_image_the_server_returns_reaches_the_model_as_a_file(make_server) -> None:
    agent = mcp_agent([Step(tool_calls=[call("dot", {})]), "a dot"], make_server())
    assert (await agent.session("s").chat("draw")).status == "completed"
    dot = results(agent)["dot"]
    assert dot.output == [{"type": "text", "text": "A red dot:"}, {"type": "file", "mediaType": "image/png", "url": PNG_URL}]
    assert dot.parts == [TextPart(text="A red dot:"), FilePart(media_type="image/png", data=PNG)]
