"""Classify turn errors: context overflow, rate limit, transient, fatal.

Registered under the entry point ``overflow_classifier``. Its ``classify_chat_error`` runs
``trylast``, so any classifier you register yourself is asked first, and this one answers only
when yours has no opinion (returns ``None``).

Two functions are exported so that custom classifiers can delegate to them:

``default_context_overflow_classifier(error)``
    ``"context_overflow"`` or ``None``. Recognises the overflow messages and codes of OpenAI,
    Azure, Anthropic, Gemini/Vertex, Bedrock, Mistral, Groq, DeepSeek, xAI, OpenRouter, Ollama,
    vLLM, llama.cpp, LM Studio, Together/TGI, Cerebras and others, and refuses the look-alikes
    that are not overflows (Bedrock's ``Too many tokens, please wait``, per-minute token rate
    limits, ``max_tokens is too large``, output-length stop reasons).

``classify_error(error)``
    ``"context_overflow"``, ``"rate_limit"``, ``"transient"``, ``"fatal"`` or ``None``.

Both accept a :class:`~think_core.ProviderError` (its ``status``, ``code``, ``type``,
``message``, ``body`` and ``headers`` are used), any other exception (its ``.message`` or
``str()``, plus ``status``/``status_code``/``code``/``type``/``body`` attributes when it has
them, as the openai and anthropic SDK exceptions do), a string, or any JSON-able object such as
a parsed error body.

Delegating from your own plugin, for a gateway with its own wording::

    from think_core import hookimpl
    from think_plugins.overflow import classify_error

    class MyGatewayClassifier:
        @hookimpl(tryfirst=True)
        def classify_chat_error(self, error, ctx):
            if "upstream budget exhausted" in str(error):
                return "fatal"
            if "conversation too big for gateway" in str(error):
                return "context_overflow"
            return classify_error(error)  # or default_context_overflow_classifier(error)

Returning ``None`` instead of delegating also works: the bundled classifier then answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from think_core import ChatErrorContext, ProviderError, hookimpl

__all__ = [
    "MAX_RETRY_AFTER_SECONDS",
    "OverflowClassifier",
    "classify_error",
    "default_context_overflow_classifier",
]

Classification = Literal["context_overflow", "rate_limit", "transient", "fatal"]

# A server-directed wait longer than this is not worth retrying (openai-python >= 2.52 refuses
# to retry past 120 s). Azure's daily quota says "retry after 86400 seconds": that is fatal.
MAX_RETRY_AFTER_SECONDS = 120.0


def _union(patterns: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


# --------------------------------------------------------------------------------------------
# Context overflow
# --------------------------------------------------------------------------------------------

# Error codes / types that mean overflow whatever the message says. Compared lower-cased.
_OVERFLOW_CODES = frozenset(
    {
        "context_length_exceeded",  # OpenAI, Azure, Groq, Bedrock Mantle, compat servers
        "exceed_context_size_error",  # llama.cpp server
        "model_context_window_exceeded",  # Anthropic stop_reason, z.ai finish_reason
        "request_too_large",  # Anthropic 413: request bytes (images); compaction shrinks it
    }
)

_OVERFLOW_PATTERNS = _union(
    [
        # --- Generic phrasings, shared by many OpenAI-compatible servers --------------------
        r"context[_ ]length[_ ]exceeded",  # the OpenAI code, also spelt out or upper-cased
        r"model_context_window_exceeded",  # stop/finish reason surfaced as error text
        r"context[ _]window[ _](?:exceeded|exceeds|full)",  # MiniMax, CrewAI
        r"too many (?:input |total )?tokens",  # Bedrock, Cohere, AI21 (throttling excluded)
        r"(?:context|token) limit exceeded|exceeds? (?:the )?token limit",
        # --- OpenAI / Azure / DeepSeek / vLLM / OpenRouter / Aleph Alpha ---------------------
        # "This model's maximum context length is 128000 tokens. However, ..."; OpenRouter
        # says "This endpoint's maximum context length"; LiteLLM proxies "exceeds the model's
        # maximum context length of N tokens".
        r"maximum context length",
        # gpt-5 era: "Input tokens exceed the configured limit of 272000 tokens."
        r"input tokens exceed the configured limit",
        # Responses API in-stream: "Your input exceeds the context window of this model."
        r"exceeds? (?:the |your )?(?:model'?s )?context window",
        # "Please reduce the length of the messages or completion." (OpenAI, Groq, DeepSeek),
        # OpenRouter "...length of either one". Anchored on "of": "could not reduce the
        # length" is not an overflow, nor Anthropic's rate-limit "reduce the prompt length".
        r"reduce the length of\b",
        # --- Anthropic (direct and on Bedrock) ---------------------------------------------
        r"prompt is too long",  # "prompt is too long: 213450 tokens > 200000 maximum"
        # "input length and `max_tokens` exceed context limit: 189136 + 20000 > 204648"
        r"exceed (?:the |your )?context limit",
        r"input and output tokens exceed",
        r"input length exceeds (?:the )?context window",
        r"request exceeds the maximum size",  # 413 request_too_large (bytes, e.g. images)
        # --- Google Gemini / Vertex ----------------------------------------------------------
        # "The input token count (1196265) exceeds the maximum number of tokens allowed"
        r"exceeds the maximum number of tokens",
        r"input token count\b.*\bexceeds",
        r"request payload size exceeds the limit",  # Vertex: bytes, compaction shrinks them
        # --- AWS Bedrock ----------------------------------------------------------------------
        r"input is too long",  # "Input is too long for requested model." (also Replicate)
        r"too many total text bytes",
        r"expected maxlength:",
        # Bedrock Mantle (OpenAI-compatible): "prompt tokens (N) exceed model maximum (M)"
        r"exceed(?:s|ed)?(?: customer)? model maximum",
        # --- Mistral --------------------------------------------------------------------------
        r"too large for model with \d+ maximum context length",
        # --- xAI (Grok) -----------------------------------------------------------------------
        r"maximum prompt length is \d+",
        # --- OpenRouter / Poolside ------------------------------------------------------------
        r"exceeds (?:the )?maximum allowed input length",
        # --- Ollama ---------------------------------------------------------------------------
        r"prompt too long; exceeded (?:max )?context length",
        r"(?:input length|prompt) (?:exceeds|is longer than) the context length",
        # --- vLLM -----------------------------------------------------------------------------
        r"exceeds the max_model_len",
        # --- llama.cpp server -----------------------------------------------------------------
        r"exceeds the available context",  # "...exceeds the available context size. try ..."
        # --- LM Studio ------------------------------------------------------------------------
        r"greater than the context length",
        # --- Together AI / Hugging Face TGI ---------------------------------------------------
        r"is longer than the model'?s context length",
        r"`inputs` tokens \+ `max_new_tokens` must be",
        # --- Cerebras: a message, or a 400/413 with no body at all -----------------------------
        r"current length is \d+ while limit is \d+",
        r"^\s*4(?:00|13)\s*(?:status code)?\s*\(no body\)",
        # --- Others ---------------------------------------------------------------------------
        r"prompt token count of \d+ exceeds the limit",  # GitHub Copilot
        r"exceeded model token limit",  # Kimi for Coding
        r"range of input length should be",  # DashScope / Qwen
        r"prompt has [\d,]+ tokens?, but the configured context size",  # DS4 server
        r"input text length should not exceed",  # NLP Cloud
        r"input too long:.*input tokens, limit is",  # LiteLLM-listed gateway
    ]
)

# Look-alikes that must never count as an overflow, checked before the patterns above (but
# after the explicit overflow codes). Each would otherwise match a generic phrase.
_NOT_OVERFLOW_PATTERNS = _union(
    [
        # Bedrock throttling: "ThrottlingException: Too many tokens, please wait before trying
        # again." matches "too many tokens" but is a rate limit.
        r"throttl",
        r"please wait",
        # Any rate limit, including Anthropic's "...per-minute rate limit... Please reduce the
        # prompt length" and Azure's "exceeded token rate limit".
        r"rate[\s_-]*limit",
        r"too many requests",
        # OpenAI "Request too large for gpt-4o ... on tokens per min (TPM)": a per-minute budget,
        # not the context window.
        r"tokens? per min",
        r"\b[TR]PM\b",
        r"per[- ]minute",
        r"quota",
        # OpenAI per-field string limits ("Invalid 'user': string too long"), not the context.
        r"string_above_max_length",
        r"invalid 'user'",
    ]
)


# --------------------------------------------------------------------------------------------
# Other classes
# --------------------------------------------------------------------------------------------

# Retrying cannot help: billing, quota exhausted for the period, spend caps. Checked before the
# rate-limit rules because OpenAI's insufficient_quota arrives as HTTP 429.
_FATAL_QUOTA_CODES = frozenset(
    {
        "insufficient_quota",  # OpenAI (HTTP 429)
        "billing_error",  # Anthropic 402
        "enforced_spend_limit_reached",  # Anthropic 429 error.details.error_code
        "billing_hard_limit_reached",  # OpenAI
    }
)
_FATAL_QUOTA_PATTERNS = _union(
    [
        r"insufficient_quota",
        r"exceeded your current quota",  # OpenAI
        r"check your plan and billing",  # OpenAI
        r"enforced_spend_limit_reached",  # Anthropic monthly spend cap (HTTP 429)
        r"credit balance is too low",  # Anthropic billing
        r"insufficient (?:credits|balance|funds)",  # OpenRouter 402 and similar gateways
        # OpenAI "Request too large for <model> ... on tokens per min (TPM)": the one request
        # is bigger than the whole per-minute budget, so waiting never lets it through.
        r"request too large for .* per min",
    ]
)

_RATE_LIMIT_CODES = frozenset(
    {
        "rate_limit_exceeded",  # OpenAI
        "rate_limit_error",  # Anthropic
        "resource_exhausted",  # Gemini / Vertex
        "throttlingexception",  # Bedrock
        "token_quota_reached",
        "too_many_requests",
    }
)
_RATE_LIMIT_PATTERNS = _union(
    [
        r"rate[\s_-]*limit",  # OpenAI, Anthropic, Azure "token rate limit", generic
        r"too many requests",
        r"throttl",  # Bedrock ThrottlingException, "throttled"
        r"please wait before trying again",  # Bedrock "Too many tokens, please wait ..."
        r"service tier capacity exceeded",  # Mistral
        r"token_quota_reached",
        r"tokens? per min|requests? per min|\b[TR]PM\b",  # per-minute budgets
        r"quota exceeded|resource[ _]exhausted",  # Vertex / Gemini per-minute quotas
    ]
)

# Gemini quota violations that waiting minutes cannot clear: a daily quota (quotaId
# "GenerateRequestsPerDayPerProjectPerModel-FreeTier"), or "limit: 0" for the plan.
_GOOGLE_HOPELESS_QUOTA = re.compile(r"PerDay|\blimit: 0\b", re.IGNORECASE)

_TRANSIENT_STATUSES = frozenset({408, 409, 425, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529})
_TRANSIENT_CODES = frozenset(
    {
        "overloaded_error",  # Anthropic 529 (also in-stream)
        "api_error",  # Anthropic 500
        "server_error",  # OpenAI 500 (also in-stream)
        "timeout_error",  # Anthropic 504
        "unavailable",  # Gemini 503
        "internal",  # Gemini 500
        "deadline_exceeded",  # Gemini 504
        "serviceunavailableexception",  # Bedrock
        "internalserverexception",  # Bedrock
        "modelnotreadyexception",  # Bedrock
    }
)
_TRANSIENT_PATTERNS = _union(
    [
        r"\boverloaded\b",  # Anthropic "Overloaded", Gemini "The model is overloaded"
        r"server had an error",  # OpenAI 500
        r"internal (?:server )?error",  # "Internal server error (500)", Gemini "An internal error"
        r"service (?:is )?(?:temporarily )?unavailable|temporarily out of capacity",
        r"bad gateway|gateway time-?out",
        r"timed? ?out\b|timeout",  # "Request timed out.", "network timeout"
        r"connection (?:error|reset|refused|aborted|closed)",  # "Connection error."
        r"peer closed connection",  # httpx RemoteProtocolError mid-body
        r"\bECONN(?:RESET|REFUSED|ABORTED)\b|\bETIMEDOUT\b|\bEPIPE\b",
        r"stream ended (?:unexpectedly|without)",
    ]
)

# Exception classes (matched by name anywhere in the MRO, so httpx, httpcore and the SDKs need
# not be imported) whose failures are worth retrying.
_TRANSIENT_EXCEPTION_NAMES = frozenset(
    {
        "TimeoutException",  # httpx: ConnectTimeout, ReadTimeout, WriteTimeout, PoolTimeout
        "NetworkError",  # httpx: ConnectError, ReadError, WriteError, CloseError
        "RemoteProtocolError",  # httpx/httpcore: "peer closed connection without ..."
        "ConnectError",
        "ConnectTimeout",
        "ReadTimeout",
        "WriteTimeout",
        "PoolTimeout",
        "ReadError",
        "WriteError",
        "APIConnectionError",  # openai / anthropic SDKs (APITimeoutError subclasses it)
        "APITimeoutError",
        "ServerDisconnectedError",  # aiohttp
        "ClientConnectionError",  # aiohttp
    }
)

_FATAL_STATUSES = frozenset({400, 401, 402, 403, 404, 405, 410, 413, 415, 422})
_FATAL_CODES = frozenset(
    {
        "invalid_request_error",  # OpenAI / Anthropic (overflow already handled)
        "authentication_error",  # Anthropic 401
        "permission_error",  # Anthropic 403
        "not_found_error",  # Anthropic 404
        "invalid_api_key",  # OpenAI 401
        "model_not_found",  # OpenAI 404
        "invalid_argument",  # Gemini 400
        "unauthenticated",  # Gemini 401
        "permission_denied",  # Gemini 403
        "not_found",  # Gemini 404
        "failed_precondition",  # Gemini (e.g. region not supported)
        "validationexception",  # Bedrock (overflow already handled)
        "accessdeniedexception",  # Bedrock
        "resourcenotfoundexception",  # Bedrock
    }
)
_FATAL_PATTERNS = _union(
    [
        r"incorrect api key|invalid (?:x-)?api[ _-]?key|api key not valid",  # auth
        r"\bunauthori[sz]ed\b|\bforbidden\b|permission denied|access denied",
        r"does not exist or you do not have access",  # OpenAI model 404
        r"model .{0,80}\bnot found\b|\bno such model\b",  # Ollama 'model "x" not found'
        r"max_tokens is too large",  # a parameter to fix, not a context to shrink
        r"invalid (?:parameter|argument|value)|unsupported (?:parameter|value)",
    ]
)

# Status codes spelt inside a message: openai-python "Error code: 429 - {...}", think's own
# "HTTP 503: ...", "status code 401", "status_code=500".
_STATUS_IN_TEXT = re.compile(
    r"\bHTTP[ /](?:\d(?:\.\d)? )?([1-5]\d\d)\b"
    r"|error code:? ([1-5]\d\d)\b"
    r"|status[ _]?code[ :=]*([1-5]\d\d)\b",
    re.IGNORECASE,
)
# Azure: "Please retry after 86400 seconds."
_RETRY_AFTER_IN_TEXT = re.compile(
    r"retry after (\d+(?:\.\d+)?) ?s(?:ec(?:ond)?s?)?\b", re.IGNORECASE
)
_RETRY_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")  # Gemini RetryInfo "34.4s"


# --------------------------------------------------------------------------------------------
# Normalising the input
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Facts:
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
    if isinstance(delay, str) and (match := _RETRY_DELAY.match(delay)):
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


def _facts(error: Any) -> _Facts:
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
    if status is None and (match := _STATUS_IN_TEXT.search(text)):
        status = int(next(g for g in match.groups() if g))
    if retry_after is None and delays:
        retry_after = max(delays)
    if retry_after is None and (match := _RETRY_AFTER_IN_TEXT.search(text)):
        retry_after = float(match.group(1))
    return _Facts(status=status, codes=frozenset(codes), text=text, retry_after=retry_after)


def _is_empty_error(error: Any) -> bool:
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


def _is_transport_error(error: Any) -> bool:
    if not isinstance(error, BaseException):
        return False
    for exc in _exception_chain(error):
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return True
        if any(cls.__name__ in _TRANSIENT_EXCEPTION_NAMES for cls in type(exc).__mro__):
            return True
    return False


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def _overflow(facts: _Facts, error: Any) -> bool:
    if facts.codes & _OVERFLOW_CODES:
        return True
    if facts.status == 429:  # a 429 is never the context window, whatever its text says
        return False
    if facts.status in (400, 413) and _is_empty_error(error):
        return True
    if _NOT_OVERFLOW_PATTERNS.search(facts.text):
        return False
    return _OVERFLOW_PATTERNS.search(facts.text) is not None


def _google_quota(facts: _Facts) -> Classification:
    """Gemini says "You exceeded your current quota, please check your plan" for every quota;
    only its details tell a per-minute limit (wait ``retryDelay``) from a daily one or a model
    the plan has no quota for at all (``limit: 0``), which no retry gets past."""
    if _GOOGLE_HOPELESS_QUOTA.search(facts.text):
        return "fatal"
    if facts.retry_after is not None and facts.retry_after > MAX_RETRY_AFTER_SECONDS:
        return "fatal"
    return "rate_limit"


def default_context_overflow_classifier(error: Any) -> Literal["context_overflow"] | None:
    """Return ``"context_overflow"`` if ``error`` says the prompt does not fit the model's
    context window, else ``None``.

    Favours recall (a missed overflow means no recovery, while a false positive costs one
    compaction and a retry that fails the same way) but rejects the known look-alikes: rate
    limits that mention tokens, ``max_tokens`` parameter errors and output-length stops.
    """
    return "context_overflow" if _overflow(_facts(error), error) else None


def classify_error(error: Any) -> Classification | None:
    """Classify a turn error; ``None`` when nothing is recognised.

    Order: context overflow; billing/quota and hopeless waits (fatal, even when sent as 429);
    rate limits; transient failures (5xx, 529, timeouts, dropped connections); other client
    errors (fatal).
    """
    facts = _facts(error)
    if _overflow(facts, error):
        return "context_overflow"

    # --- Fatal: money, or a wait no retry budget covers --------------------------------------
    if facts.status == 402 or facts.codes & _FATAL_QUOTA_CODES:
        return "fatal"
    if "resource_exhausted" in facts.codes:
        return _google_quota(facts)
    if _FATAL_QUOTA_PATTERNS.search(facts.text):
        return "fatal"
    if facts.retry_after is not None and facts.retry_after > MAX_RETRY_AFTER_SECONDS:
        return "fatal"

    # --- Rate limits --------------------------------------------------------------------------
    if facts.status == 429 or facts.codes & _RATE_LIMIT_CODES:
        return "rate_limit"
    if _RATE_LIMIT_PATTERNS.search(facts.text):
        return "rate_limit"

    # --- Transient ----------------------------------------------------------------------------
    if facts.status is None and _is_transport_error(error):
        return "transient"
    if facts.status is not None and (facts.status in _TRANSIENT_STATUSES or facts.status >= 500):
        return "transient"
    if facts.codes & _TRANSIENT_CODES:
        return "transient"
    if facts.status is None and _TRANSIENT_PATTERNS.search(facts.text):
        return "transient"

    # --- Fatal: the request itself is wrong ------------------------------------------------------
    if facts.status is not None and (facts.status in _FATAL_STATUSES or 400 <= facts.status < 500):
        return "fatal"
    if facts.codes & _FATAL_CODES:
        return "fatal"
    if _FATAL_PATTERNS.search(facts.text):
        return "fatal"
    return None


class OverflowClassifier:
    """The bundled ``classify_chat_error`` implementation (runs last; see the module doc)."""

    name = "overflow_classifier"

    @hookimpl(trylast=True)
    def classify_chat_error(
        self, error: BaseException, ctx: ChatErrorContext | None
    ) -> Classification | None:
        return classify_error(error)
