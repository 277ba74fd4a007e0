"""A non-idempotent tool for crash tests across processes: every execution appends one line to
the file named by ``THINK_TEST_LEDGER`` (``O_APPEND``: whole lines, whichever process writes)."""

from __future__ import annotations

import json
import os
import time

from think_core import tool


@tool
def record(key: str, nonce: str) -> str:
    """Record that the answer to message ``key`` is being prepared."""
    line = json.dumps({"key": key, "nonce": nonce, "pid": os.getpid()}) + "\n"
    fd = os.open(os.environ["THINK_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return f"recorded {key}"


TOOLS = [record]


@tool(needs_approval=True)
def send_invoice(customer: str) -> str:
    """Send an invoice to ``customer`` (a human approves each one first). With
    ``THINK_TEST_HANG_AFTER_SEND`` set it then hangs, so a test can kill the process after the
    side effect and before its result is stored."""
    line = json.dumps({"key": customer, "pid": os.getpid()}) + "\n"
    fd = os.open(os.environ["THINK_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    if os.environ.get("THINK_TEST_HANG_AFTER_SEND"):
        time.sleep(3600)
    return f"invoice sent to {customer}"


APPROVAL_TOOLS = [send_invoice]
