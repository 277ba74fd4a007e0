"""think with the tools of an MCP server, offline: a scripted model calls the tools of
``notes_server.py``, which think starts as a subprocess.

    pip install 'think-agent[mcp]'
    python examples/mcp/run.py

The second turn runs in read-only mode: the bundled read-only guard blocks ``delete_note``
because the server annotates it ``destructiveHint``, and lets the ``readOnlyHint`` tools run.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from think_core import Think
from think_core.mcp import MCPServer
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.types import TurnResult
from think_plugins.readonly import ReadOnlyGuard

NOTES_SERVER = Path(__file__).with_name("notes_server.py")

# What a real model would do; swap in Think("openai:gpt-4o-mini", ...) to let one decide.
SCRIPT = [
    Step(tool_calls=[call("search_notes", {"query": "milk"})]),
    Step(tool_calls=[call("read_note", {"title": "groceries"})]),
    "Your groceries note mentions milk: eggs, milk, bread.",
    Step(tool_calls=[call("delete_note", {"title": "groceries"})]),
    "I cannot delete it: this session is read-only.",
]


def show(question: str, result: TurnResult) -> None:
    print(f"> {question}")
    for part in result.message.parts if result.message else []:
        if part["type"].startswith("tool-"):
            outcome = part.get("output", part.get("errorText"))
            print(f"  {part['type'][5:]}({part['input']}) -> {outcome}")
    print(f"  {result.text}\n")


async def main() -> None:
    notes = MCPServer.stdio(sys.executable, [str(NOTES_SERVER)])
    async with Think(ScriptedModel(SCRIPT), tools=[notes], plugins=[ReadOnlyGuard()], load_entrypoints=False) as agent:
        session = await agent.session("example").open()  # starts the server and lists its tools
        for tool in notes.tools:
            print(f"{tool.name}: {tool.description} (read-only: {tool.read_only})")
        print()
        question = "Which note mentions milk?"
        show(question, await session.chat(question))
        question = "Delete it."
        show(question, await session.chat(question, body={"read_only": True}))
    # Leaving the block closed the agent, and with it the server process.


if __name__ == "__main__":
    asyncio.run(main())
