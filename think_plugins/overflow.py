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

from typing import Any, Literal

from think_core import ChatErrorContext, hookimpl

from ._error_facts import Facts, facts_of, is_empty_error, is_transport_error
from ._error_vocabulary import (
    FATAL_CODES,
    FATAL_PATTERNS,
    FATAL_QUOTA_CODES,
    FATAL_QUOTA_PATTERNS,
    FATAL_STATUSES,
    GOOGLE_HOPELESS_QUOTA,
    NOT_OVERFLOW_PATTERNS,
    OVERFLOW_CODES,
    OVERFLOW_PATTERNS,
    RATE_LIMIT_CODES,
    RATE_LIMIT_PATTERNS,
    TRANSIENT_CODES,
    TRANSIENT_PATTERNS,
    TRANSIENT_STATUSES,
)

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


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def _overflow(facts: Facts, error: Any) -> bool:
    if facts.codes & OVERFLOW_CODES:
        return True
    if facts.status == 429:  # a 429 is never the context window, whatever its text says
        return False
    if facts.status in (400, 413) and is_empty_error(error):
        return True
    if NOT_OVERFLOW_PATTERNS.search(facts.text):
        return False
    return OVERFLOW_PATTERNS.search(facts.text) is not None


def _google_quota(facts: Facts) -> Classification:
    """Gemini says "You exceeded your current quota, please check your plan" for every quota;
    only its details tell a per-minute limit (wait ``retryDelay``) from a daily one or a model
    the plan has no quota for at all (``limit: 0``), which no retry gets past."""
    if GOOGLE_HOPELESS_QUOTA.search(facts.text):
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
    return "context_overflow" if _overflow(facts_of(error), error) else None


def classify_error(error: Any) -> Classification | None:
    """Classify a turn error; ``None`` when nothing is recognised.

    Order: context overflow; billing/quota and hopeless waits (fatal, even when sent as 429);
    rate limits; transient failures (5xx, 529, timeouts, dropped connections); other client
    errors (fatal).
    """
    facts = facts_of(error)
    if _overflow(facts, error):
        return "context_overflow"
    # Fatal: money, or a wait no retry budget covers (even when sent as 429).
    if facts.status == 402 or facts.codes & FATAL_QUOTA_CODES:
        return "fatal"
    if "resource_exhausted" in facts.codes:
        return _google_quota(facts)
    if _hopeless(facts):
        return "fatal"
    if _rate_limited(facts):
        return "rate_limit"
    if _transient(facts, error):
        return "transient"
    if _bad_request(facts):
        return "fatal"
    return None


def _hopeless(facts: Facts) -> bool:
    """A quota message, or a wait no retry budget covers."""
    too_long = facts.retry_after is not None and facts.retry_after > MAX_RETRY_AFTER_SECONDS
    return bool(too_long or FATAL_QUOTA_PATTERNS.search(facts.text))


def _rate_limited(facts: Facts) -> bool:
    return bool(facts.status == 429 or facts.codes & RATE_LIMIT_CODES or RATE_LIMIT_PATTERNS.search(facts.text))


def _transient(facts: Facts, error: Any) -> bool:
    """5xx, 529, timeouts, dropped connections."""
    if facts.status is None:
        return bool(is_transport_error(error) or facts.codes & TRANSIENT_CODES or TRANSIENT_PATTERNS.search(facts.text))
    return bool(facts.status in TRANSIENT_STATUSES or facts.status >= 500 or facts.codes & TRANSIENT_CODES)


def _bad_request(facts: Facts) -> bool:
    """The request itself is wrong (other client errors)."""
    in_4xx = facts.status is not None and (facts.status in FATAL_STATUSES or 400 <= facts.status < 500)
    return bool(in_4xx or facts.codes & FATAL_CODES or FATAL_PATTERNS.search(facts.text))


class OverflowClassifier:
    """The bundled ``classify_chat_error`` implementation (runs last; see the module doc)."""

    name = "overflow_classifier"

    @hookimpl(trylast=True)
    def classify_chat_error(
        self, error: BaseException, ctx: ChatErrorContext | None
    ) -> Classification | None:
        return classify_error(error)
