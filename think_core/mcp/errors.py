"""The errors of MCP tools. Raised from a tool call, they become error results the model reads."""

from __future__ import annotations

from ..errors import ConfigurationError

__all__ = ["MCPServerError", "MCPSessionLost", "MCPToolError", "MissingMCPExtra"]


class MCPToolError(RuntimeError):
    """The server answered a call with an error (an ``isError`` result or a protocol error)."""


class MCPServerError(RuntimeError):
    """The server could not be started or reached, stopped, or did not answer in time."""


class MCPSessionLost(MCPServerError):
    """An HTTP server no longer knows the connection's session (it restarted): the call was
    refused, not run, so it can be sent again on a new connection."""


class MissingMCPExtra(ConfigurationError):
    """The ``mcp`` package is not installed."""

    def __init__(self) -> None:
        super().__init__("MCP servers need the 'mcp' package: pip install 'think-agent[mcp]'")
