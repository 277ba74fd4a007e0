"""Keep credentials out of the server's logs.

uvicorn's access log writes each request line with its query string, and its WebSocket lines
(``"WebSocket /agents/think/s?token=…" [accepted]``) do too — where browsers put the token.
:class:`RedactSecrets` rewrites a record's arguments before any formatter sees them:
credential-like query parameters become ``name=***`` and ``Authorization`` / bearer values
become ``***``. :func:`uvicorn_log_config` is uvicorn's own logging configuration with the
filter on its handlers, which is what ``think serve`` runs with.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

#: Query parameters whose values are credentials (matched case-insensitively, whole name).
SECRET_PARAMS = (
    "token", "access_token", "refresh_token", "id_token", "auth", "authorization", "key", "api_key", "apikey",
    "api-key", "x-api-key", "secret", "client_secret", "password", "passwd", "pwd", "sig", "signature",
)
REDACTED = "***"

_QUERY_SECRET = re.compile(r"(?i)(?<=[?&;])(" + "|".join(re.escape(p) for p in SECRET_PARAMS) + r")=[^&;#\s\"']*")
_AUTH_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|digest|token)\s+)?[^\s,;\"']+"
)
_BEARER = re.compile(r"(?i)\b(bearer[ .])[A-Za-z0-9\-._~+/=]+")


def redact(text: str) -> str:
    """``text`` with credential values in query strings and authorization headers masked."""
    text = _QUERY_SECRET.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (int, float, type(None))):
        return value
    text = str(value)
    clean = redact(text)
    return value if clean == text else clean


class RedactSecrets(logging.Filter):
    """A logging filter that masks credentials in a record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_value(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _redact_value(v) for k, v in record.args.items()}
        return True


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's default ``log_config`` with :class:`RedactSecrets` on every handler."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_secrets"] = {"()": f"{__name__}.RedactSecrets"}
    for handler in config["handlers"].values():
        handler.setdefault("filters", []).append("redact_secrets")
    return config
