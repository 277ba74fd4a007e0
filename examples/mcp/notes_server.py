"""A tiny MCP server for the example, written with the ``mcp`` SDK: notes kept in memory.

``python notes_server.py`` speaks MCP over stdin/stdout; think starts it for you.
"""

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("notes", log_level="WARNING")
notes = {"groceries": "eggs, milk, bread", "ideas": "an agent that uses MCP tools"}


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def search_notes(query: str) -> list[str]:
    """The titles of the notes that mention the query."""
    return [title for title, text in notes.items() if query.lower() in (title + " " + text).lower()]


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_note(title: str) -> str:
    """The text of a note."""
    return notes.get(title, f"there is no note called {title!r}")


@app.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_note(title: str) -> str:
    """Delete a note."""
    return "deleted" if notes.pop(title, None) is not None else f"there is no note called {title!r}"


if __name__ == "__main__":
    app.run()
