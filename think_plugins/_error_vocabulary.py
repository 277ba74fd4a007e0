"""What providers say when they fail: the codes, statuses and message patterns of context
overflow, rate limits, hopeless quotas, transient and fatal errors, gathered from OpenAI, Azure,
Anthropic, Gemini/Vertex, Bedrock, Mistral, Groq, DeepSeek, xAI, OpenRouter, Ollama, vLLM,
llama.cpp, LM Studio, Together/TGI, Cerebras and others (see ``overflow.py``, which uses them)."""

from __future__ import annotations

import re
from collections.abc import Iterable


def union(patterns: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


# --------------------------------------------------------------------------------------------
# Context overflow
# --------------------------------------------------------------------------------------------

# Error codes / types that mean overflow whatever the message says. Compared lower-cased.
OVERFLOW_CODES = frozenset(
    {
        "context_length_exceeded",  # OpenAI, Azure, Groq, Bedrock Mantle, compat servers
        "exceed_context_size_error",  # llama.cpp server
        "model_context_window_exceeded",  # Anthropic stop_reason, z.ai finish_reason
        "request_too_large",  # Anthropic 413: request bytes (images); compaction shrinks it
    }
)

OVERFLOW_PATTERNS = union(
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
NOT_OVERFLOW_PATTERNS = union(
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
FATAL_QUOTA_CODES = frozenset(
    {
        "insufficient_quota",  # OpenAI (HTTP 429)
        "billing_error",  # Anthropic 402
        "enforced_spend_limit_reached",  # Anthropic 429 error.details.error_code
        "billing_hard_limit_reached",  # OpenAI
    }
)
FATAL_QUOTA_PATTERNS = union(
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

RATE_LIMIT_CODES = frozenset(
    {
        "rate_limit_exceeded",  # OpenAI
        "rate_limit_error",  # Anthropic
        "resource_exhausted",  # Gemini / Vertex
        "throttlingexception",  # Bedrock
        "token_quota_reached",
        "too_many_requests",
    }
)
RATE_LIMIT_PATTERNS = union(
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
GOOGLE_HOPELESS_QUOTA = re.compile(r"PerDay|\blimit: 0\b", re.IGNORECASE)

TRANSIENT_STATUSES = frozenset({408, 409, 425, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529})
TRANSIENT_CODES = frozenset(
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
TRANSIENT_PATTERNS = union(
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
TRANSIENT_EXCEPTION_NAMES = frozenset(
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

FATAL_STATUSES = frozenset({400, 401, 402, 403, 404, 405, 410, 413, 415, 422})
FATAL_CODES = frozenset(
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
FATAL_PATTERNS = union(
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
STATUS_IN_TEXT = re.compile(
    r"\bHTTP[ /](?:\d(?:\.\d)? )?([1-5]\d\d)\b"
    r"|error code:? ([1-5]\d\d)\b"
    r"|status[ _]?code[ :=]*([1-5]\d\d)\b",
    re.IGNORECASE,
)
# Azure: "Please retry after 86400 seconds."
RETRY_AFTER_IN_TEXT = re.compile(
    r"retry after (\d+(?:\.\d+)?) ?s(?:ec(?:ond)?s?)?\b", re.IGNORECASE
)
RETRY_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")  # Gemini RetryInfo "34.4s"
