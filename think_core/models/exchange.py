"""What a step exchanged with its provider, for ``StepResult.request`` / ``response`` /
``warnings``: the request body as sent (credentials travel in headers and are never part of
it), the response's id, model and the headers worth keeping, and what was dropped on the way
(a setting the provider does not support).

Whoever streams a step opens a :class:`StepExchange` in :data:`EXCHANGE`; providers fill it as
they go. Outside a step (a provider used on its own) the calls do nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EXCHANGE", "StepExchange", "record_request", "record_response", "warn", "warn_unsupported"]

#: Response headers kept on ``StepResult.response["headers"]``: request ids and rate-limit state,
#: never anything that authenticates (``set-cookie`` and the like are not kept).
_KEPT_HEADERS = ("x-request-id", "request-id", "openai-processing-ms", "retry-after", "cf-ray")
_KEPT_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")


@dataclass
class StepExchange:
    request: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


EXCHANGE: ContextVar[StepExchange | None] = ContextVar("think_step_exchange", default=None)


def record_request(body: dict[str, Any]) -> None:
    """The body of the attempt being sent (the last attempt's is the one that answered)."""
    exchange = EXCHANGE.get()
    if exchange is not None:
        exchange.request = body


def record_response(headers: Mapping[str, str]) -> None:
    exchange = EXCHANGE.get()
    if exchange is not None:
        exchange.headers = {
            name: value
            for name, value in ((k.lower(), v) for k, v in headers.items())
            if name in _KEPT_HEADERS or name.startswith(_KEPT_PREFIXES)
        }


def warn(message: str) -> None:
    exchange = EXCHANGE.get()
    if exchange is not None and message not in exchange.warnings:
        exchange.warnings.append(message)


def warn_unsupported(provider: str, settings: Iterable[tuple[str, Any]]) -> None:
    """A warning for each set call setting the provider's API has no place for (it is dropped)."""
    for name, value in settings:
        if value is not None:
            warn(f"{provider} does not support the {name} setting; it was not sent")
