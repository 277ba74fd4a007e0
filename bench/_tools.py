"""Tools the benchmarks give ``think serve`` (``--tools bench._tools:TOOLS``)."""

from __future__ import annotations

from think_core import tool


@tool
def note(text: str) -> str:
    """Take a note."""
    return f"noted {text}"


TOOLS = [note]
