"""A small MCP server for tests/test_mcp.py, written with the ``mcp`` SDK.

``python tests/mcp_server.py`` serves over stdio; ``python tests/mcp_server.py --http`` serves
streamable HTTP on a free loopback port and prints that port as its first line of stdout.

Its tools: a read-only ``lookup`` (every answer carries the server's count of lookups of that key,
so a test can tell a cached answer from a new call; tests sharing a server use keys of their own),
``stats`` (those counts), a destructive ``delete_key``, an idempotent ``set_key``, ``fail`` (an
``isError`` result), ``pid`` and ``sleep`` (to kill the server mid-call).
"""

from __future__ import annotations

import os
import socket
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

app = MCPServer("think-test", log_level="WARNING")
store: dict[str, str] = {}
lookups: dict[str, int] = {}


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(key: str) -> str:
    """Look up a key."""
    lookups[key] = lookups.get(key, 0) + 1
    return f"{key}={store.get(key, 'blue')} (lookup #{lookups[key]})"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def stats() -> dict[str, int]:
    """How often each key was really looked up."""
    return dict(lookups)


@app.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_key(key: str) -> str:
    """Delete a key."""
    store.pop(key, None)
    return f"deleted {key}"


@app.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
def set_key(key: str, value: str) -> str:
    """Set a key (the same call twice changes nothing more)."""
    store[key] = value
    return f"{key}={value}"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail(reason: str) -> str:
    """Always fails."""
    raise ToolError(f"cannot do it: {reason}")


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@app.tool()
async def sleep(seconds: float) -> str:
    """Wait, then answer."""
    await anyio.sleep(seconds)
    return "slept"


def serve_http() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app.streamable_http_app(), log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    if sys.argv[1:] == ["--http"]:
        serve_http()
    else:
        app.run()
