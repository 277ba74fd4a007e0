"""Show one stored conversation: each message's role, text and tool calls.

Example: think history cli      (the session ``think run`` uses by default)

Every stored message is shown, including those a compaction summarised for the model.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import Any

from ..errors import ConfigurationError
from ..messages import is_tool_part, tool_name_of
from .cited import CITED_TYPES, cited_line
from .stored import add_db_arguments, open_stored


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="session id (see: think sessions)")
    add_db_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the UI messages as JSON")


def _part_lines(part: dict[str, Any]) -> list[str]:
    kind = part.get("type")
    if kind == "text":
        return [str(part.get("text", ""))]
    if is_tool_part(part):
        call = f"[tool {tool_name_of(part)}({json.dumps(part.get('input'), ensure_ascii=False)})"
        if part.get("errorText"):
            return [f"{call} → error: {part['errorText']}]"]
        if "output" in part:
            return [f"{call} → {json.dumps(part['output'], ensure_ascii=False)}]"]
        return [f"{call} {part.get('state', '')}]".replace(" ]", "]")]
    if kind in CITED_TYPES:  # what an answer cites, a file (its type and size, never its bytes)
        return [f"[{cited_line(part)}]"]
    return []  # reasoning, step boundaries: not part of what was said


def run(args: argparse.Namespace) -> int:
    try:
        store = open_stored(args)
    except ConfigurationError as exc:
        print(f"think history: {exc}", file=sys.stderr)
        return 1
    with store:
        known = store.list_sessions()
        if args.session not in known:
            close = difflib.get_close_matches(args.session, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            print(f"think history: no session {args.session!r} in {store.location}{hint}", file=sys.stderr)
            return 1
        messages = store.list_messages(args.session)
    if args.json:
        print(json.dumps([m.model_dump(mode="json") for m in messages], indent=2, ensure_ascii=False))
        return 0
    for message in messages:
        lines = [line for part in message.parts for line in _part_lines(part)]
        lines.extend(outcome_lines(message.metadata))
        print(f"{message.role}: " + "\n".join(lines).strip())
        print()
    return 0


def outcome_lines(metadata: dict[str, Any] | None) -> list[str]:
    """How a turn ended when it did not simply complete: stopped, or failed with its error (on
    the partial answer, or on the user message the turn answered when nothing was said)."""
    lines = ["(stopped)"] if (metadata or {}).get("stopped") else []
    error = (metadata or {}).get("error")
    if error:
        lines.append(f"error: {error}")
    return lines
