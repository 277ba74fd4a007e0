"""``[mcp.servers.NAME]`` tables of ``think.toml``: MCP servers for the command line's agent.

::

    [mcp.servers.files]                  # a server started as a subprocess (stdio)
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
    env = { LOG_LEVEL = "warn" }

    [mcp.servers.search]                 # a streamable-HTTP server
    url = "https://search.example/mcp"
    headers = { Authorization = "Bearer ..." }
    prefix = "search"                    # its tools are called search_<name>
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .server import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_TIMEOUT,
    MCPServer,
)

__all__ = ["MCPConfig", "MCPServerConfig"]


class MCPServerConfig(BaseModel):
    """One ``[mcp.servers.NAME]`` table: ``command`` (with ``args``, ``env``, ``cwd``) or ``url``
    (with ``headers``), and the options of :class:`~think_core.mcp.MCPServer`."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    prefix: str | None = None
    timeout: float = Field(DEFAULT_TIMEOUT, gt=0)
    connect_timeout: float = Field(DEFAULT_CONNECT_TIMEOUT, gt=0)
    max_restarts: int = Field(DEFAULT_MAX_RESTARTS, ge=0)
    idempotency_keys: bool = False

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (an HTTP server)")
        if self.url is not None and (self.args or self.env is not None or self.cwd is not None):
            raise ValueError("args, env and cwd belong to a command, not to a url")
        if self.command is not None and self.headers is not None:
            raise ValueError("headers belong to a url, not to a command")
        return self

    def build(self, name: str) -> MCPServer:
        options: dict[str, Any] = {"name": name, "prefix": self.prefix, "timeout": self.timeout,
                   "connect_timeout": self.connect_timeout, "max_restarts": self.max_restarts,
                   "idempotency_keys": self.idempotency_keys}
        if self.url is not None:
            return MCPServer.http(self.url, self.headers, **options)
        assert self.command is not None
        return MCPServer.stdio(self.command, self.args, self.env, cwd=self.cwd, **options)


class MCPConfig(BaseModel):
    """The ``[mcp]`` table."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, MCPServerConfig] = Field(default_factory=dict)

    def build(self) -> list[MCPServer]:
        """An :class:`~think_core.mcp.MCPServer` per table, named by its table."""
        return [server.build(name) for name, server in self.servers.items()]
