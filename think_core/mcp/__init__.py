"""Tools from MCP servers (the ``mcp`` extra: ``pip install 'think-agent[mcp]'``).

::

    from think_core import Think
    from think_core.mcp import MCPServer

    files = MCPServer.stdio("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"])
    search = MCPServer.http("https://search.example/mcp", headers={"Authorization": "Bearer ..."})
    agent = Think("openai:gpt-4o-mini", tools=[files, search, my_tool])

Importing this package does not import the SDK; opening a server does.
"""

from __future__ import annotations

from .errors import MCPServerError, MCPSessionLost, MCPToolError, MissingMCPExtra
from .plugin import MCPTools
from .server import MCPServer
from .tools import MCPTool

__all__ = [
    "MCPServer", "MCPServerError", "MCPSessionLost", "MCPTool", "MCPToolError", "MCPTools", "MissingMCPExtra",
]
