"""A small MCP server for tests/test_mcp.py, written with the ``mcp`` SDK.

``python tests/mcp_server.py`` serves over stdio; ``python tests/mcp_server.py --http [PORT]``
serves streamable HTTP on a loopback port (a free one by default) and prints that port as its
first line of stdout.

Its tools: a read-only ``lookup`` (every answer carries the server's count of lookups of that key,
so a test can tell a cached answer from a new call; tests sharing a server use keys of their own),
``stats`` (those counts), a destructive ``delete_key``, an idempotent ``set_key``, ``fail`` (an
``isError`` result), ``pid`` and ``sleep`` (to kill the server mid-call), ``header`` (an HTTP
request header, to see the client's headers arrive), ``charge`` (a payment that honours the
idempotency key in the request's ``_meta``: a repeated key is answered without a second charge)
``charges_made`` (the charges made) and ``dot`` (a caption and an image).
"""

from __future__ import annotations

import base64
import os
import socket
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
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


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that carried this call ("" over stdio)."""
    request = ctx.request_context.request
    return request.headers.get(name, "") if request is not None else ""


charges: dict[str, float] = {}
IDEMPOTENCY_KEY = "think/idempotency-key"


def _meta(ctx: Context) -> dict[str, object]:
    meta = ctx.request_context.meta
    if meta is None:
        return {}
    return dict(meta) if isinstance(meta, dict) else meta.model_dump(by_alias=True)


@app.tool(annotations=ToolAnnotations(destructive_hint=True))
def charge(amount: float, ctx: Context) -> str:
    """Charge ``amount``; a call whose idempotency key was charged already charges nothing more."""
    key = _meta(ctx).get(IDEMPOTENCY_KEY)
    if not isinstance(key, str):
        raise ToolError("an idempotency key is required")
    charges.setdefault(key, amount)
    return f"charged {charges[key]} for {key}"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def charges_made() -> dict[str, float]:
    """The charges made, by idempotency key."""
    return dict(charges)


#: A 1x1 PNG, for the tool that returns an image.
DOT_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@app.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def dot() -> list[object]:
    """A caption and an image (MCP image content)."""
    return ["A red dot:", Image(data=DOT_PNG, format="png")]


def serve_http(port: int = 0) -> None:
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app.streamable_http_app(), log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        serve_http(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    else:
        app.run()
