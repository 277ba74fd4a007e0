"""What a tool call's result becomes: strict JSON for the store, the UI stream and the model
(a tool's ``File`` results as ``file`` items), an exception as the error text the model reads,
and the call's idempotency key."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from ..files import tool_output_with_files

__all__ = ["describe_error", "idempotency_key", "jsonable"]


def idempotency_key(session_id: str, request_id: str, step_number: int, call_id: str) -> str:
    """A call's idempotency key: the same for the same call of the same turn (a durable turn's
    request id is its submission's id, restored with its steps and call ids after a crash), and
    short and opaque enough for any service's ``Idempotency-Key`` (payment APIs take 255 chars)."""
    journal_position = "\x1f".join((session_id, request_id, str(step_number), call_id))
    return "think-" + hashlib.sha256(journal_position.encode()).hexdigest()[:40]


def describe_error(exc: BaseException) -> str:
    """``Type: message`` of a failed call, as the model reads it."""
    try:
        text = str(exc)
    except Exception:  # an exception whose __str__ fails must not fail the turn
        text = ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def jsonable(value: Any) -> Any:
    """Tool outputs are persisted and streamed as strict JSON: pydantic models and other objects
    are converted, and NaN/Infinity (which ``JSON.parse`` rejects) become ``null``; a ``File``
    becomes a ``file`` item (a data URL) beside the text."""
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    with_files = tool_output_with_files(value)
    if with_files is not None:
        return with_files
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return _finite(to_jsonable_python(value, fallback=_unrepresentable))
    except Exception:
        return _unrepresentable(value)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _unrepresentable(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"
