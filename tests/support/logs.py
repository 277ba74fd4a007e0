"""What the engine logs, as a test reads it from ``caplog``."""

from __future__ import annotations

import logging

import pytest


def failure_events(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The ``chat:request:failed`` records of the ``think.events`` logger."""
    return [r for r in caplog.records if r.name == "think.events" and r.getMessage() == "chat:request:failed"]
