"""Run one prompt through an agent and stream the answer to stdout.

Example: think run "Summarise RFC 9110 in one line" --model openai:gpt-4o-mini
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import ConfigurationError
from .common import add_agent_arguments, build_agent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help="the user message")
    add_agent_arguments(parser)
    parser.add_argument("--session", default="cli", help="session id (default: cli)")
    parser.add_argument("--json", action="store_true", help="print the TurnResult as JSON instead of streaming text")


async def run(args: argparse.Namespace) -> int:
    try:
        agent = build_agent(args)
    except ConfigurationError as exc:
        print(f"think: {exc}", file=sys.stderr)
        return 2
    try:
        session = agent.session(args.session)
        if args.json:
            result = await session.chat(args.prompt)
            print(result.model_dump_json(indent=2))
            return 0 if result.status == "completed" else 1
        status = "completed"

        def show(chunk: dict[str, Any]) -> None:
            nonlocal status
            kind = chunk["type"]
            if kind == "text-delta":
                sys.stdout.write(chunk["delta"])
                sys.stdout.flush()
            elif kind == "tool-input-available":
                print(f"\n[tool {chunk['toolName']}({chunk['input']})]", file=sys.stderr)
            elif kind == "error":
                status = "error"
                print(f"\nthink: error: {chunk['errorText']}", file=sys.stderr)

        result = await session.chat(args.prompt, on_event=show)
        print()
        return 0 if result.status == "completed" and status == "completed" else 1
    finally:
        await agent.aclose()
