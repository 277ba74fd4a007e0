"""List the stored conversations: session id, messages, last activity, how each began.

Reads the database ``think run`` / ``chat`` / ``serve`` write (``--db``, else think.toml's
``db``, else ``think.db`` in think's data directory). ``think history SESSION`` shows one.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from ..errors import ConfigurationError
from .stored import add_db_arguments, first_user_text, open_stored

PREVIEW_CHARS = 60


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db_arguments(parser)
    parser.add_argument("-n", "--limit", type=int, default=20, help="most recently active sessions to show (0: all; default: 20)")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of lines")


def run(args: argparse.Namespace) -> int:
    try:
        store = open_stored(args)
    except ConfigurationError as exc:
        print(f"think sessions: {exc}", file=sys.stderr)
        return 1
    with store:
        summaries = store.session_summaries()
        if args.limit > 0:
            summaries = summaries[: args.limit]
        rows = [
            {
                "session": s.session_id,
                "messages": s.messages,
                "updated": datetime.fromtimestamp(s.updated_at).isoformat(timespec="seconds"),
                "first": first_user_text(store.list_messages(s.session_id)),
            }
            for s in summaries
        ]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print(f"no conversations in {store.location}")
    width = max((len(s.session_id) for s in summaries), default=0)
    for row in rows:
        first = " ".join(str(row["first"] or "").split())
        if len(first) > PREVIEW_CHARS:
            first = first[: PREVIEW_CHARS - 1] + "…"
        print(f"{row['session']:<{width}}  {row['updated']}  {row['messages']:>4} messages  {first}")
    return 0
