"""Helpers every provider's wire mapping uses: tool results as text, streamed tool input as a
dict, names the APIs accept, stop reasons in the engine's vocabulary."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from .base import ToolMessage

__all__ = ["decode_json", "parse_tool_input", "stop_reason_mapper", "tool_output_text", "wire_name"]

# The decoder's own C scanner (set in JSONDecoder.__init__; the type stubs do not list it).
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_json(text: str) -> Any:
    """``json.loads(text)``, faster for the common event payload that is exactly one JSON value.

    It runs once per streamed token, so it calls the scanner directly and skips ``loads``'s
    whitespace scans and frames; anything else (whitespace around the value, a BOM, not JSON)
    goes through ``json.loads`` itself, so the result and the error are the same.
    """
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def tool_output_text(message: ToolMessage) -> str:
    """A tool result as the string the model reads (JSON for anything but a string)."""
    output = message.output
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(output)


def parse_tool_input(raw: str) -> dict[str, Any] | None:
    """A streamed call's input: ``{}`` for empty arguments (a tool without parameters), ``None``
    unless the text is a JSON object (the engine reports that to the model)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


_UNSAFE_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def wire_name(name: str, max_length: int) -> str:
    """``name`` as the APIs accept tool and schema names: ``[a-zA-Z0-9_-]{1,max_length}``."""
    return (_UNSAFE_NAME_CHARS.sub("_", name) or "output")[:max_length]


def stop_reason_mapper(table: Mapping[str, str]) -> Callable[[str | None], str]:
    """A function from a provider's stop reason to the engine's vocabulary (``stop``, ``length``,
    ``tool-calls``, ``content-filter``), ``other`` for a reason the table does not know."""

    def engine_reason(reason: str | None) -> str:
        return table.get(reason or "", "other")

    return engine_reason
