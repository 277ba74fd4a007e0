"""``MCPServer``: an MCP server whose tools an agent offers its model."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .errors import MCPServerError, MCPSessionLost, MissingMCPExtra
from .tools import MCPTool, tool_output

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["MCPServer"]

logger = logging.getLogger("think.mcp")

DEFAULT_TIMEOUT = 120.0
DEFAULT_CONNECT_TIMEOUT = 30.0
DEFAULT_MAX_RESTARTS = 3


class MCPServer:
    """An MCP server. Put it in ``Think(tools=[...])`` beside ordinary tools: the agent offers the
    model every tool the server lists, and each call goes through ``before_tool_call`` /
    ``after_tool_call`` like any tool's. Build one with :meth:`stdio` or :meth:`http`.

    The connection opens when the agent's first session opens (``await agent.session().open()``
    opens it early and raises what went wrong) and is closed by ``agent.aclose()``. A server
    that stops is started again at the next call, up to ``max_restarts`` times (an HTTP server
    is connected to again); the call that was running fails with an error the model reads,
    except a call of a read-only or idempotent tool, or one an HTTP server refused because it
    forgot the session, which is sent once more on the new connection.

    :param name: how messages and logs call the server.
    :param prefix: put before each of the server's tool names (``prefix_name``), to keep the
        tools of two servers apart.
    :param timeout: seconds one tool call may take.
    :param connect_timeout: seconds to start (or reach) the server and list its tools.
    :param max_restarts: how many times a server that stopped is started again.
    :param idempotency_keys: the server honours the idempotency key think sends with every call
        (``params._meta["think/idempotency-key"]``): its tools are ``idempotent_with_key``, so a
        call cut off by a crash, or lost with the connection, is sent again with the same key.
    """

    def __init__(
        self,
        transport: tuple[str, dict[str, Any]],
        *,
        name: str,
        prefix: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        idempotency_keys: bool = False,
    ) -> None:
        if importlib.util.find_spec("mcp") is None:
            raise MissingMCPExtra()
        if timeout <= 0 or connect_timeout <= 0 or max_restarts < 0:
            raise ValueError("timeout and connect_timeout must be positive, max_restarts not negative")
        self._transport = transport
        self.name = name
        self.prefix = prefix
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_restarts = max_restarts
        self.idempotency_keys = idempotency_keys
        self.restarts = 0
        self._tools: list[MCPTool] = []
        self._conn: Connection | None = None
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
        **options: Any,
    ) -> MCPServer:
        """A server started as ``command args...``, speaking MCP over its stdin and stdout. Its
        environment is a small safe one (``PATH``, ``HOME``, ...) plus ``env``: pass what it needs."""
        spec: dict[str, Any] = {"command": command, "args": list(args), "env": dict(env) if env is not None else None,
                                "cwd": os.fspath(cwd) if cwd is not None else None}
        default_name = os.path.splitext(os.path.basename(spec["args"][0] if spec["args"] else command))[0]
        return cls(("stdio", spec), name=name or default_name, **options)

    @classmethod
    def http(
        cls, url: str, headers: Mapping[str, str] | None = None, *, name: str | None = None, **options: Any
    ) -> MCPServer:
        """A server at a streamable-HTTP endpoint (``http://host:port/mcp``); ``headers`` (an
        ``Authorization`` header, say) go with every request."""
        spec = {"url": url, "headers": dict(headers) if headers is not None else None}
        return cls(("http", spec), name=name or urlsplit(url).netloc or url, **options)

    @property
    def tools(self) -> list[MCPTool]:
        """The server's tools (empty until it was opened)."""
        return list(self._tools)

    async def open(self) -> list[MCPTool]:
        """Start or connect to the server and list its tools (once; again after it stopped)."""
        await self._connection()
        return self.tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any], *, repeatable: bool = False, meta: dict[str, Any] | None = None
    ) -> Any:
        """Call the server's tool ``name``; its output (see :func:`~think_core.mcp.tools.tool_output`).

        :param repeatable: the call changes nothing (or carries a key the server honours), so it
            may be sent again to a restarted server.
        :param meta: the request's ``_meta`` (the call's idempotency key).
        :raises MCPToolError: the server answered with an error.
        :raises MCPServerError: the server stopped, could not be reached or did not answer in time.
        """
        conn = await self._connection()
        try:
            result = await conn.call(name, arguments, self.timeout, meta)
        except MCPServerError as exc:
            if conn.alive:
                raise  # a slow or failing answer of a running server: not a reason to restart it
            if not (repeatable or isinstance(exc, MCPSessionLost)):
                again = "connects again" if self._transport[0] == "http" else "starts the server again"
                effect = "The call may or may not have taken effect"
                raise MCPServerError(f"{str(exc).rstrip('.')}. {effect}; the next call {again}.") from None
            logger.warning("%s; calling %r again", exc, name)
            result = await (await self._connection()).call(name, arguments, self.timeout, meta)
        return tool_output(result)

    async def aclose(self) -> None:
        """Close the connection (a stdio server is asked to exit, then killed)."""
        conn, self._conn = self._conn, None
        self.restarts = 0
        if conn is not None and conn.loop is asyncio.get_running_loop():
            await conn.close(timeout=10.0)

    # -- the connection -----------------------------------------------------------------------------
    async def _connection(self) -> Connection:
        async with self._loop_lock():
            conn = self._conn
            loop = asyncio.get_running_loop()
            if conn is not None and conn.loop is loop:
                if conn.alive:
                    return conn
                again = "reconnected" if self._transport[0] == "http" else "started again"
                if self.restarts >= self.max_restarts:
                    raise MCPServerError(
                        f"MCP server {self.name!r} stopped ({conn.failure}); it was {again} "
                        f"{self.restarts} time(s) already, so it is not {again} any more"
                    )
                self.restarts += 1
                logger.info("MCP server %r stopped (%s); it is %s", self.name, conn.failure, again)
                await conn.close(timeout=10.0)
            return await self._start()

    async def _start(self) -> Connection:
        try:  # the SDK takes a second to import: not on the event loop, where other turns run
            connection = await asyncio.to_thread(importlib.import_module, f"{__package__}.connection")
        except ImportError as exc:
            raise MissingMCPExtra() from exc
        kind, spec = self._transport
        factory = connection.stdio_client_factory(**spec) if kind == "stdio" else connection.http_client_factory(**spec)
        conn: Connection = connection.Connection(factory, self.name, remote=kind == "http")
        specs = await conn.start(self.connect_timeout)
        self._conn = conn
        if not self._tools:  # the names the model was offered stay those of the first listing
            self._tools = [MCPTool(self, spec, self._tool_name(spec.name)) for spec in specs]
        return conn

    def _tool_name(self, remote: str) -> str:
        return f"{self.prefix}_{remote}" if self.prefix else remote

    def _loop_lock(self) -> asyncio.Lock:
        # A lock per event loop: an agent may be used from one asyncio.run() after another.
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    def __repr__(self) -> str:
        kind, spec = self._transport
        where = spec.get("url") or " ".join([spec["command"], *spec["args"]])
        return f"<MCPServer {self.name!r} {kind}: {where}>"
