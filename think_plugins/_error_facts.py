"""What a failed call says about itself, whatever shape it comes in (a ``ProviderError``, an SDK
exception, a string, a parsed error body): its status, codes, text and requested wait."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from think_core import ProviderError

from ._error_vocabulary import RETRY_AFTER_IN_TEXT, RETRY_DELAY, STATUS_IN_TEXT, TRANSIENT_EXCEPTION_NAMES


@dataclass(frozen=True)
class Facts:
    """An error reduced to what classifying it needs."""

    status: int | None
    codes: frozenset[str]  # lower-cased code / type / status strings
    text: str
    retry_after: float | None  # seconds the server asked us to wait, if it said


def _as_int_status(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 100 <= value <= 599:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return _as_int_status(int(value.strip()))
    return None


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, BaseException):
        message = getattr(value, "message", None)
        return message if isinstance(message, str) and message else str(value)
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def _maybe_json(value: Any) -> Any:
    """Parse a JSON object or array given as text, so its codes can be read; else return it."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _walk_body(body: Any, codes: set[str], statuses: list[int], delays: list[float]) -> None:
    """Collect code/type/status labels from an error body: the top level, ``error``, ``details``
    (OpenAI, Anthropic, Gemini, vLLM and OpenRouter shapes), and Gemini's list wrapper."""
    body = _maybe_json(body)
    if isinstance(body, list):
        for item in body[:4]:
            _walk_body(item, codes, statuses, delays)
        return
    if not isinstance(body, Mapping):
        return
    for key in ("code", "type", "status", "error_code", "__type", "reason"):
        value = body.get(key)
        if isinstance(value, str) and value and not value.strip().isdigit():
            codes.add(value.strip().lower())
        status = _as_int_status(value) if key in ("code", "status") else None
        if status is not None:
            statuses.append(status)
    delay = body.get("retryDelay")
    if isinstance(delay, str) and (match := RETRY_DELAY.match(delay)):
        delays.append(float(match.group(1)))
    for key in ("error", "details", "response"):
        nested = body.get(key)
        if isinstance(nested, (Mapping, list)):
            _walk_body(nested, codes, statuses, delays)


def _retry_after_from_headers(headers: Any) -> float | None:
    if not isinstance(headers, Mapping):
        return None
    lowered = {str(k).lower(): v for k, v in headers.items()}
    for key, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(lowered[key]) * scale
        except (KeyError, TypeError, ValueError):
            continue
    return None


def facts_of(error: Any) -> Facts:
    codes: set[str] = set()
    statuses: list[int] = []
    delays: list[float] = []
    parts: list[str] = []
    status: int | None = None
    retry_after: float | None = None

    if isinstance(error, BaseException):
        # ProviderError, and duck-typed SDK exceptions (openai/anthropic APIStatusError carry
        # status_code, code, type and body).
        status = _as_int_status(getattr(error, "status", None)) or _as_int_status(
            getattr(error, "status_code", None)
        )
        for attr in ("code", "type"):
            value = getattr(error, attr, None)
            if isinstance(value, str) and value:
                if value.strip().isdigit():
                    statuses.append(int(value.strip()))
                else:
                    codes.add(value.strip().lower())
                    parts.append(value)
            elif (as_status := _as_int_status(value)) is not None:
                statuses.append(as_status)
        parts.append(_to_text(error))
        body = getattr(error, "body", None)
        if body is not None:
            _walk_body(body, codes, statuses, delays)
            parts.append(_to_text(body))
        retry_after = _retry_after_from_headers(getattr(error, "headers", None))
    else:
        _walk_body(error, codes, statuses, delays)
        parts.append(_to_text(error))

    text = "\n".join(p for p in parts if p)
    if status is None and statuses:
        status = statuses[0]
    if status is None and (match := STATUS_IN_TEXT.search(text)):
        status = int(next(g for g in match.groups() if g))
    if retry_after is None and delays:
        retry_after = max(delays)
    if retry_after is None and (match := RETRY_AFTER_IN_TEXT.search(text)):
        retry_after = float(match.group(1))
    return Facts(status=status, codes=frozenset(codes), text=text, retry_after=retry_after)


def is_empty_error(error: Any) -> bool:
    """A ProviderError with neither message nor body (Cerebras answers 400/413 with no body)."""
    return (
        isinstance(error, ProviderError)
        and not (error.message or "").strip()
        and error.body in (None, "", b"", {})
    )


def _exception_chain(error: BaseException) -> Iterable[BaseException]:
    """The error and its explicit causes (``raise ProviderError(...) from exc``)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        yield current
        current = current.__cause__


def is_transport_error(error: Any) -> bool:
    if not isinstance(error, BaseException):
        return False
    for exc in _exception_chain(error):
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return True
        if any(cls.__name__ in TRANSIENT_EXCEPTION_NAMES for cls in type(exc).__mro__):
            return True
    return False
