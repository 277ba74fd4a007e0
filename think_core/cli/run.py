"""Run one prompt through an agent and stream the answer to stdout.

Examples:
  think run "Summarise RFC 9110 in one line" --model openai:gpt-4o-mini
  git diff | think run --model openai:gpt-4o-mini      # the prompt read from stdin
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import ConfigurationError
from .cited import CITED_TYPES, cited_line
from .common import add_agent_arguments, add_plugin_arguments, agent_from_args, endpoint_note, quiet_turn_failures


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", nargs="?", help="the user message (default: read from stdin)")
    add_agent_arguments(parser)
    add_plugin_arguments(parser)
    parser.add_argument("--session", default="cli", help="session id (default: cli)")
    parser.add_argument("--json", action="store_true", help="print the TurnResult as JSON instead of streaming text")


def read_prompt(args: argparse.Namespace) -> str:
    """The prompt argument, else what stdin holds (not when stdin is a terminal: nobody is typing)."""
    if args.prompt is not None:
        return str(args.prompt)
    if sys.stdin is None or sys.stdin.isatty():
        raise ConfigurationError('no prompt: pass one (think run "...") or pipe it on stdin')
    prompt = sys.stdin.read()
    if not prompt.strip():
        raise ConfigurationError("no prompt: stdin was empty")
    return prompt


async def run(args: argparse.Namespace) -> int:
    try:
        prompt = read_prompt(args)
        agent = agent_from_args(args)
        quiet_turn_failures(args)
    except ConfigurationError as exc:
        print(f"think: {exc}", file=sys.stderr)
        return 2
    try:
        session = agent.session(args.session)
        if args.json:
            result = await session.chat(prompt)
            print(result.model_dump_json(indent=2))
            return 0 if result.status == "completed" else 1
        status = "completed"
        where = endpoint_note(agent)

        def show(chunk: dict[str, Any]) -> None:
            nonlocal status
            kind = chunk["type"]
            if kind == "text-delta":
                sys.stdout.write(chunk["delta"])
                sys.stdout.flush()
            elif kind == "tool-input-available":
                print(f"\n[tool {chunk['toolName']}({chunk['input']})]", file=sys.stderr)
            elif kind in CITED_TYPES:
                print(f"\n[{cited_line(chunk)}]", file=sys.stderr)
            elif kind == "error":
                status = "error"
                print(f"\nthink: error: {chunk['errorText']}{where}", file=sys.stderr)

        result = await session.chat(prompt, on_event=show)
        print()
        return 0 if result.status == "completed" and status == "completed" else 1
    finally:
        await agent.aclose()
