"""The plugin through which an agent's MCP servers join its tools.

``Think`` registers one when ``tools=`` holds :class:`~think_core.mcp.MCPServer` objects. Its
``configure_session`` opens the servers (once: a session opened later finds them open) and adds
their tools to the agent's tool table, so every turn sees them; its ``aclose`` closes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, MutableMapping
from typing import Any

from ..errors import ConfigurationError
from ..hooks.markers import hookimpl
from ..tools import AnyTool
from .server import MCPServer
from .tools import MCPTool

__all__ = ["MCPTools"]


class MCPTools:
    """Opens ``servers`` and puts their tools into ``tools`` (the agent's own table)."""

    name = "mcp"

    def __init__(self, servers: Iterable[MCPServer], tools: MutableMapping[str, AnyTool]) -> None:
        self.servers = list(servers)
        self._tools = tools

    @hookimpl
    async def configure_session(self, session: Any) -> None:
        await self.open()

    async def open(self) -> None:
        """Open every server (concurrently) and add their tools; the first failure is raised."""
        results = await asyncio.gather(*(server.open() for server in self.servers), return_exceptions=True)
        opened: list[MCPTool] = []
        for result in results:
            if isinstance(result, BaseException):
                raise result
            opened.extend(result)
        for tool in opened:
            self._add(tool)

    def _add(self, tool: MCPTool) -> None:
        taken = self._tools.get(tool.name)
        if taken is not None and taken is not tool and getattr(taken, "server", None) is not tool.server:
            raise ConfigurationError(
                f"MCP server {tool.server.name!r} has a tool {tool.name!r}, a name {taken!r} already has; "
                "give the server a prefix (MCPServer.stdio(..., prefix='x'))"
            )
        self._tools[tool.name] = tool

    async def aclose(self) -> None:
        await asyncio.gather(*(server.aclose() for server in self.servers), return_exceptions=True)
