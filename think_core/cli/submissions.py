"""Show the durable submissions in flight across the store: running, pending, orphaned.

Example: think submissions --db postgresql://think@db/think     (what every server shares)

A running submission is orphaned when its owner's lease expired, or its owner was a process on
this host that is gone: a recovering process (think serve) takes it over. A pending one is
unclaimed when no submission of its session runs ahead of it (it is next; a long wait there
means the process that accepted it died before claiming it), queued when one does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..durable.crash_recovery import lease_expiry
from ..durable.orphan_watch import find_orphans
from ..errors import ConfigurationError
from ..process_identity import this_process
from ..store import SubmissionOwner, UnfinishedSubmission
from .stored import add_db_arguments, open_stored

DEFAULT_LEASE = 30.0  # Think's default submission_lease


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of lines")
    parser.add_argument(
        "--lease", type=float, default=DEFAULT_LEASE,
        help=f"seconds assumed for owners that recorded no lease (default: {DEFAULT_LEASE:g})",
    )


def describe(rows: list[UnfinishedSubmission], *, me: SubmissionOwner, lease: float, now: float) -> list[dict[str, Any]]:
    """One dict per unfinished row, in acceptance order, saying what state it is in."""
    found = find_orphans(rows, me, lease=lease, now=now, here=this_process())
    orphaned = {row.submission_id for row in found.orphaned.values()}
    next_up = {row.submission_id for row in found.waiting.values()}
    described = []
    for row in rows:
        owner = row.owner
        entry: dict[str, Any] = {
            "session": row.session_id,
            "submission": row.submission_id,
            "state": row.status,
            "age": round(now - row.created_at, 1),
            "owner": None if owner is None or row.status == "pending" else f"{owner.host} pid {owner.pid}",
            "lease_left": None,
        }
        if row.status == "running":
            entry["lease_left"] = round(lease_expiry(row, lease) - now, 1)
            # is_orphaned only sees the first orphaned row of a session; any row past its lease is one too
            if row.submission_id in orphaned or entry["lease_left"] <= 0:
                entry["state"] = "orphaned"
        else:
            entry["state"] = "unclaimed" if row.submission_id in next_up else "queued"
        described.append(entry)
    return described


def run(args: argparse.Namespace) -> int:
    try:
        store = open_stored(args)
    except ConfigurationError as exc:
        print(f"think submissions: {exc}", file=sys.stderr)
        return 1
    with store:
        rows = describe(store.unfinished_submissions(), me=store.submission_owner(), lease=args.lease, now=time.time())
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print(f"no submission running or pending in {store.location}")
        return 0
    counts = {state: sum(r["state"] == state for r in rows) for state in ("running", "orphaned", "unclaimed", "queued")}
    print(", ".join(f"{n} {state}" for state, n in counts.items()))
    width = max(len(r["session"]) for r in rows)
    for r in rows:
        held = f"  {r['owner']}" if r["owner"] else ""
        left = r["lease_left"]
        if left is not None:
            held += f", lease ends in {left:.1f} s" if left > 0 else f", lease expired {-left:.1f} s ago"
            if left > 0 and r["state"] == "orphaned":
                held += ", its process is gone"
        print(f"{r['state']:<9}  {r['session']:<{width}}  {r['submission']}  accepted {r['age']:.1f} s ago{held}")
    return 0
