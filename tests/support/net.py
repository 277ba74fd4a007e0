"""Local network endpoints for tests: a port nothing listens on."""

from __future__ import annotations

import socket


def closed_port() -> int:
    """A local TCP port nothing listens on (bound to find a free one, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
