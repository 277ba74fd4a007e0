"""The bundled error classifier against real provider error bodies and messages.

Every message below is a verbatim capture of a real provider's error, or a test case of
Cloudflare's ``defaultContextOverflowClassifier``.
"""

from __future__ import annotations

from typing import Any

import pluggy
import pytest

import think_core.hooks.specs
from think_core import ProviderError, hookimpl
from think_core.hooks.markers import PROJECT
from think_plugins.overflow import (
    OverflowClassifier,
    classify_error,
    default_context_overflow_classifier,
)

# --- Verbatim provider texts reused by several cases -----------------------------------------

OPENAI_OVERFLOW = (
    "This model's maximum context length is 128000 tokens. However, your messages resulted in "
    "204308 tokens. Please reduce the length of the messages."
)
OPENAI_OVERFLOW_BODY = {
    "error": {
        "message": OPENAI_OVERFLOW,
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
OPENAI_TPM_RATE_LIMIT = (
    "Rate limit reached for gpt-4o in organization org-test on tokens per min (TPM): Limit 30000, "
    "Used 29937, Requested 385. Please try again in 644ms. Visit "
    "https://platform.openai.com/account/rate-limits to learn more."
)
OPENAI_REQUEST_TOO_LARGE_TPM = (
    "Request too large for gpt-4o in organization org-test on tokens per min (TPM): Limit 30000, "
    "Requested 31538. The input or output tokens must be reduced in order to run successfully."
)
OPENAI_QUOTA = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, read the docs: "
    "https://platform.openai.com/docs/guides/error-codes/api-errors."
)
OPENAI_MAX_TOKENS_PARAM = (
    "max_tokens is too large: 8192. This model supports at most 4096 completion tokens, whereas "
    "you provided 8192."
)
OPENAI_SERVER_ERROR = (
    "The server had an error processing your request. Sorry about that! You can retry your "
    "request, or contact us through our help center at help.openai.com if you keep seeing this "
    "error."
)
ANTHROPIC_OVERFLOW = "prompt is too long: 213450 tokens > 200000 maximum"
ANTHROPIC_RATE_LIMIT = (
    "Number of request tokens has exceeded your per-minute rate limit "
    "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. "
    "Please reduce the prompt length or the maximum tokens requested, or try again later. You may "
    "also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a "
    "rate limit increase."
)
BEDROCK_THROTTLING = "ThrottlingException: Too many tokens, please wait before trying again."
GEMINI_OVERFLOW = (
    "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576)."
)
AZURE_DAILY_LIMIT = (
    "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
    "2024-08-01-preview have exceeded token rate limit of your current OpenAI S0 pricing tier. "
    "Please retry after 86400 seconds."
)
RESPONSES_OVERFLOW = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)


def anthropic_body(type_: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}


def openai_body(message: str, type_: str, code: str | None, param: str | None = None) -> Any:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def gemini_body(code: int, message: str, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


GEMINI_QUOTA = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
)


def gemini_quota_body(quota_id: str, retry_delay: str) -> dict[str, Any]:
    """A Gemini 429 as captured: a QuotaFailure naming the quota, and a RetryInfo."""
    body = gemini_body(429, GEMINI_QUOTA, "RESOURCE_EXHAUSTED")
    body["error"]["details"] = [
        {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [
                {
                    "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                    "quotaId": quota_id,
                }
            ],
        },
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay},
    ]
    return body


# --- default_context_overflow_classifier: must classify as overflow ---------------------------

OVERFLOW_CASES = [
    # OpenAI / Azure
    pytest.param(
        ProviderError(
            OPENAI_OVERFLOW,
            status=400,
            code="context_length_exceeded",
            type="invalid_request_error",
            body=OPENAI_OVERFLOW_BODY,
            provider="openai",
        ),
        id="openai-400-context_length_exceeded-providererror",
    ),
    pytest.param(
        "This model's maximum context length is 8192 tokens. However, you requested 8256 tokens "
        "(64 in the messages, 8192 in the completion). Please reduce the length of the messages "
        "or completion.",
        id="openai-with-completion-string",
    ),
    pytest.param(
        "This model's maximum context length is 4097 tokens. However, your messages resulted in "
        "4238 tokens (4143 in the messages, 95 in the functions). Please reduce the length of the "
        "messages or functions.",
        id="openai-with-functions-string",
    ),
    pytest.param(
        ProviderError(
            "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in "
            "477469 tokens. Please reduce the length of the messages.",
            status=400,
            type="invalid_request_error",
        ),
        id="openai-gpt5-configured-limit",
    ),
    pytest.param(
        ProviderError(
            RESPONSES_OVERFLOW,
            body={
                "type": "error",
                "sequence_number": 2,
                "error": {
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                    "message": RESPONSES_OVERFLOW,
                    "param": "input",
                },
            },
        ),
        id="openai-responses-in-stream-context-window",
    ),
    pytest.param(
        ProviderError("Bad request", status=400, code="context_length_exceeded", provider="azure"),
        id="azure-code-only-generic-message",
    ),
    pytest.param(
        {"error": {"message": "Context length exceeded", "code": "CONTEXT_LENGTH_EXCEEDED"}},
        id="openai-compatible-uppercase-code-dict",
    ),
    pytest.param(ValueError(OPENAI_OVERFLOW), id="openai-message-in-plain-exception"),
    pytest.param(
        "exceeds the model's maximum context length of 8192 tokens",
        id="litellm-proxy-maximum-context-length-of",
    ),
    # Anthropic
    pytest.param(
        ProviderError(
            ANTHROPIC_OVERFLOW,
            status=400,
            type="invalid_request_error",
            body={
                **anthropic_body("invalid_request_error", ANTHROPIC_OVERFLOW),
                "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
            },
            provider="anthropic",
        ),
        id="anthropic-prompt-too-long",
    ),
    pytest.param(
        f"AI_APICallError: {ANTHROPIC_OVERFLOW}", id="anthropic-cloudflare-test-apicallerror"
    ),
    pytest.param(
        anthropic_body(
            "invalid_request_error",
            "input length and `max_tokens` exceed context limit: 189136 + 20000 > 204648, "
            "decrease input length or `max_tokens` and try again",
        ),
        id="anthropic-input-plus-max_tokens-exceed-context-limit",
    ),
    pytest.param(
        ProviderError(
            "Request exceeds the maximum size", status=413, type="request_too_large"
        ),
        id="anthropic-413-request_too_large",
    ),
    pytest.param(
        {"stop_reason": "model_context_window_exceeded"},
        id="anthropic-stop_reason-model_context_window_exceeded",
    ),
    # Google Gemini / Vertex
    pytest.param(
        ProviderError(
            GEMINI_OVERFLOW,
            status=400,
            body={"error": {"code": 400, "message": GEMINI_OVERFLOW, "status": "INVALID_ARGUMENT"}},
            provider="gemini",
        ),
        id="gemini-input-token-count",
    ),
    pytest.param(
        "The input token count exceeds the maximum number of tokens allowed (1048576).",
        id="gemini-input-token-count-without-number",
    ),
    pytest.param(
        "400 Request payload size exceeds the limit: 20000 bytes", id="vertex-payload-size"
    ),
    # AWS Bedrock
    pytest.param(
        ProviderError(
            "Input is too long for requested model.", status=400, code="ValidationException"
        ),
        id="bedrock-input-is-too-long",
    ),
    pytest.param("Too many input tokens", id="bedrock-too-many-input-tokens"),
    pytest.param("too many total text bytes", id="bedrock-too-many-total-text-bytes"),
    pytest.param(
        ProviderError(
            "prompt tokens (210000) exceed model maximum (200000)",
            status=400,
            code="context_length_exceeded",
        ),
        id="bedrock-mantle-exceed-model-maximum",
    ),
    # Mistral, Groq, DeepSeek, xAI, OpenRouter
    pytest.param(
        "Prompt contains 9000 tokens ... too large for model with 8192 maximum context length",
        id="mistral-too-large-for-model",
    ),
    pytest.param(
        ProviderError(
            "Please reduce the length of the messages or completion.",
            status=400,
            code="context_length_exceeded",
            type="invalid_request_error",
            provider="groq",
        ),
        id="groq-reduce-the-length",
    ),
    pytest.param(
        "This model's maximum context length is 131072 tokens. However, you requested 131134 "
        "tokens (122942 in the messages, 8192 in the completion). Please reduce the length of the "
        "messages or completion.",
        id="deepseek-maximum-context-length",
    ),
    pytest.param(
        "This model's maximum prompt length is 131072 but the request contains 537812 tokens",
        id="xai-maximum-prompt-length",
    ),
    pytest.param(
        ProviderError(
            "This endpoint's maximum context length is 131072 tokens. However, you requested about "
            "141607 tokens (10535 of text input, 131072 in the output). Please reduce the length of "
            'either one, or use the "middle-out" transform to compress your prompt automatically.',
            status=400,
            body={"message": "...", "code": 400, "metadata": {"provider_name": None}},
            provider="openrouter",
        ),
        id="openrouter-endpoint-maximum-context-length",
    ),
    pytest.param(
        "exceeds maximum allowed input length of 32768 tokens",
        id="openrouter-poolside-input-length",
    ),
    # Local servers: vLLM, llama.cpp, LM Studio, Ollama
    pytest.param(
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you requested "
            "6379 tokens (6029 in the messages, 350 in the completion). Please reduce the length of "
            "the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        id="vllm-top-level-error-body",
    ),
    pytest.param(
        "'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's maximum context "
        "length is 65536 tokens and your request has 57879 input tokens (8192 > 65536 - 57879).",
        id="vllm-max_tokens-plus-input-over-context",
    ),
    pytest.param("prompt length 9000 exceeds the max_model_len 8192", id="vllm-max_model_len"),
    pytest.param(
        ProviderError(
            "the request exceeds the available context size. try increasing the context size or "
            "enable context shift",
            status=400,
            type="exceed_context_size_error",
            body={
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size. try increasing the "
                    "context size or enable context shift",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 9000,
                    "n_ctx": 8192,
                }
            },
        ),
        id="llamacpp-exceed_context_size_error",
    ),
    pytest.param(
        "the request exceeds the available context size, try increasing it",
        id="llamacpp-older-message",
    ),
    pytest.param(
        "tokens to keep from the initial prompt is greater than the context length",
        id="lmstudio-greater-than-context-length",
    ),
    pytest.param(
        {"error": "prompt too long; exceeded max context length by 120 tokens"},
        id="ollama-prompt-too-long-string-error-body",
    ),
    pytest.param(
        "the input length exceeds the context length", id="ollama-input-length-exceeds"
    ),
    # Hosted others
    pytest.param(
        "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
        id="together-longer-than-context-length",
    ),
    pytest.param(
        "`inputs` tokens + `max_new_tokens` must be <= 4096", id="tgi-inputs-plus-max_new_tokens"
    ),
    pytest.param("Current length is 9000 while limit is 8192", id="cerebras-current-length"),
    pytest.param("400 status code (no body)", id="cerebras-400-no-body-text"),
    pytest.param(
        ProviderError("", status=413, provider="cerebras"), id="cerebras-413-empty-providererror"
    ),
    pytest.param("prompt token count of 9000 exceeds the limit of 8192", id="github-copilot"),
    pytest.param("invalid params, context window exceeds limit", id="minimax"),
    pytest.param(
        "Your request exceeded model token limit: 8192 (requested: 9000)", id="kimi-for-coding"
    ),
    pytest.param("too many tokens", id="cohere-too-many-tokens"),
    pytest.param("Range of input length should be [1, 30720]", id="dashscope-qwen"),
    pytest.param(
        "prompt has 9000 tokens, but the configured context size is 8192 tokens", id="ds4-server"
    ),
]

# --- default_context_overflow_classifier: must NOT classify as overflow ------------------------

NOT_OVERFLOW_CASES = [
    pytest.param(BEDROCK_THROTTLING, id="trap-bedrock-throttling-too-many-tokens"),
    pytest.param(
        ProviderError(
            "Too many tokens, please wait before trying again.",
            status=400,
            code="ThrottlingException",
            provider="bedrock",
        ),
        id="trap-bedrock-throttling-providererror",
    ),
    pytest.param(
        ProviderError(
            OPENAI_TPM_RATE_LIMIT, status=429, code="rate_limit_exceeded", type="tokens"
        ),
        id="trap-openai-tokens-per-min-rate-limit",
    ),
    pytest.param(OPENAI_REQUEST_TOO_LARGE_TPM, id="trap-openai-request-too-large-tpm-string"),
    pytest.param(
        ProviderError(
            ANTHROPIC_RATE_LIMIT,
            status=429,
            type="rate_limit_error",
            body=anthropic_body("rate_limit_error", ANTHROPIC_RATE_LIMIT),
        ),
        id="trap-anthropic-rate-limit-reduce-the-prompt-length",
    ),
    pytest.param(ANTHROPIC_RATE_LIMIT, id="trap-anthropic-rate-limit-text-only"),
    pytest.param(AZURE_DAILY_LIMIT, id="trap-azure-token-rate-limit"),
    pytest.param(OPENAI_MAX_TOKENS_PARAM, id="trap-openai-max_tokens-is-too-large"),
    pytest.param(
        ProviderError(
            OPENAI_QUOTA, status=429, code="insufficient_quota", type="insufficient_quota"
        ),
        id="trap-openai-insufficient-quota",
    ),
    pytest.param(
        "Invalid 'user': string too long. Expected a string with maximum length 64, but got a "
        "string with length 100 instead.",
        id="trap-openai-user-field-string-too-long",
    ),
    pytest.param({"finish_reason": "length"}, id="trap-openai-finish_reason-length"),
    pytest.param({"stop_reason": "max_tokens"}, id="trap-anthropic-stop_reason-max_tokens"),
    pytest.param(
        {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}},
        id="trap-responses-incomplete-max_output_tokens",
    ),
    pytest.param({"finishReason": "MAX_TOKENS"}, id="trap-gemini-finishReason-MAX_TOKENS"),
    pytest.param(anthropic_body("overloaded_error", "Overloaded"), id="trap-anthropic-overloaded"),
    pytest.param("rate limit exceeded", id="trap-cloudflare-rate-limit-exceeded"),
    pytest.param("network timeout", id="trap-cloudflare-network-timeout"),
    pytest.param("401 Unauthorized: invalid api key", id="trap-cloudflare-401"),
    pytest.param("Internal server error (500)", id="trap-cloudflare-500"),
    pytest.param("tool execution failed: ECONNREFUSED", id="trap-cloudflare-econnrefused"),
    pytest.param("could not reduce the length", id="trap-cloudflare-could-not-reduce-the-length"),
    pytest.param(
        ProviderError(
            "Resource has been exhausted (e.g. check quota).",
            status=429,
            body={"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}},
        ),
        id="trap-gemini-resource-exhausted",
    ),
    pytest.param(ProviderError("", status=500), id="trap-empty-500-is-not-cerebras"),
    pytest.param(None, id="trap-none"),
]


@pytest.mark.parametrize("error", OVERFLOW_CASES)
def test_overflow_is_recognised(error: Any) -> None:
    assert default_context_overflow_classifier(error) == "context_overflow"
    assert classify_error(error) == "context_overflow"


@pytest.mark.parametrize("error", NOT_OVERFLOW_CASES)
def test_look_alikes_are_not_overflow(error: Any) -> None:
    assert default_context_overflow_classifier(error) is None
    assert classify_error(error) != "context_overflow"


# --- classify_error: the other classes ---------------------------------------------------------


class ReadTimeout(Exception):
    """Stands in for httpx.ReadTimeout: same name, so classified without importing httpx."""


class TimeoutException(Exception):
    pass


class PoolTimeout(TimeoutException):
    """A subclass: the MRO is searched, as for httpx's timeout family."""


class APIConnectionError(Exception):
    """Stands in for openai.APIConnectionError."""


class APIStatusError(Exception):
    """Duck-typed like openai.APIStatusError: ``status_code``, ``code``, ``type``, ``body``."""

    def __init__(self, message: str, status_code: int, body: Any) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.body = body
        error = body.get("error", {}) if isinstance(body, dict) else {}
        self.code = error.get("code")
        self.type = error.get("type")


def _wrapped_transport_error() -> ProviderError:
    try:
        try:
            raise ReadTimeout("")
        except ReadTimeout as exc:
            raise ProviderError("stream read failed", provider="openai") from exc
    except ProviderError as wrapped:
        return wrapped


CLASSIFY_CASES = [
    # rate_limit
    pytest.param(
        ProviderError(
            OPENAI_TPM_RATE_LIMIT,
            status=429,
            code="rate_limit_exceeded",
            type="tokens",
            headers={"retry-after": "1", "retry-after-ms": "644"},
        ),
        "rate_limit",
        id="openai-429-rate_limit_exceeded",
    ),
    pytest.param(
        ProviderError(
            ANTHROPIC_RATE_LIMIT,
            status=429,
            type="rate_limit_error",
            headers={"retry-after": "15"},
            body=anthropic_body("rate_limit_error", ANTHROPIC_RATE_LIMIT),
        ),
        "rate_limit",
        id="anthropic-429-rate_limit_error",
    ),
    pytest.param(BEDROCK_THROTTLING, "rate_limit", id="bedrock-throttling-string"),
    pytest.param(
        ProviderError(
            "Resource has been exhausted (e.g. check quota).",
            status=429,
            body={
                "error": {
                    "code": 429,
                    "status": "RESOURCE_EXHAUSTED",
                    "details": [
                        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "34.4s"}
                    ],
                }
            },
        ),
        "rate_limit",
        id="gemini-429-resource-exhausted-retrydelay",
    ),
    pytest.param(
        gemini_body(429, "Quota exceeded for quota metric", "RESOURCE_EXHAUSTED"),
        "rate_limit",
        id="gemini-429-dict",
    ),
    # Gemini words every quota alike ("You exceeded your current quota, please check your plan
    # and billing details"): the quota id and the retry delay tell a per-minute limit from a
    # daily one, or from a model the plan has no quota for ("limit: 0").
    pytest.param(
        ProviderError(
            GEMINI_QUOTA,
            status=429,
            body=gemini_quota_body("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "34.4s"),
            provider="google",
        ),
        "rate_limit",
        id="gemini-429-per-minute-quota-with-billing-wording",
    ),
    pytest.param(
        ProviderError(
            GEMINI_QUOTA,
            status=429,
            body=gemini_quota_body("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "29.8s"),
            provider="google",
        ),
        "fatal",
        id="gemini-429-daily-quota",
    ),
    pytest.param(
        ProviderError(
            GEMINI_QUOTA + "\n* Quota exceeded for metric: generativelanguage.googleapis.com/"
            "generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro\nPlease retry in 20.04s.",
            status=429,
            body=gemini_quota_body("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "20.04s"),
            provider="google",
        ),
        "fatal",
        id="gemini-429-no-quota-for-the-model",
    ),
    pytest.param(
        ProviderError(
            GEMINI_QUOTA,
            status=429,
            body=gemini_quota_body("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "3600s"),
        ),
        "fatal",
        id="gemini-429-retry-delay-past-the-cap",
    ),
    pytest.param(
        ProviderError(
            GEMINI_OVERFLOW,
            status=400,
            code="400",
            type="INVALID_ARGUMENT",
            body=gemini_body(400, GEMINI_OVERFLOW, "INVALID_ARGUMENT"),
            provider="google",
        ),
        "context_overflow",
        id="gemini-400-overflow-as-the-provider-raises-it",
    ),
    pytest.param(
        "Service tier capacity exceeded for this model.", "rate_limit", id="mistral-capacity"
    ),
    pytest.param(
        RuntimeError("rate limit exceeded"), "rate_limit", id="plain-exception-rate-limit"
    ),
    pytest.param(
        APIStatusError(
            f"Error code: 429 - {OPENAI_TPM_RATE_LIMIT}",
            429,
            openai_body(OPENAI_TPM_RATE_LIMIT, "tokens", "rate_limit_exceeded"),
        ),
        "rate_limit",
        id="openai-sdk-shaped-exception-429",
    ),
    # transient
    pytest.param(
        ProviderError(
            "Overloaded",
            status=529,
            type="overloaded_error",
            body=anthropic_body("overloaded_error", "Overloaded"),
        ),
        "transient",
        id="anthropic-529-overloaded",
    ),
    pytest.param(
        ProviderError(
            "Overloaded",
            type="overloaded_error",
            body={
                "type": "error",
                "error": {"details": None, "type": "overloaded_error", "message": "Overloaded"},
            },
        ),
        "transient",
        id="anthropic-in-stream-overloaded-no-status",
    ),
    pytest.param(
        ProviderError(
            OPENAI_SERVER_ERROR,
            body=openai_body(OPENAI_SERVER_ERROR, "server_error", None),
        ),
        "transient",
        id="openai-in-stream-server_error",
    ),
    pytest.param(
        ProviderError(OPENAI_SERVER_ERROR, status=500, type="server_error"),
        "transient",
        id="openai-500",
    ),
    pytest.param(
        ProviderError(
            "The model is overloaded. Please try again later.",
            status=503,
            body=gemini_body(
                503, "The model is overloaded. Please try again later.", "UNAVAILABLE"
            ),
        ),
        "transient",
        id="gemini-503-unavailable",
    ),
    pytest.param(
        ProviderError("Gateway Timeout", status=504, type="timeout_error"),
        "transient",
        id="anthropic-504",
    ),
    pytest.param(ProviderError("", status=502), "transient", id="bare-502"),
    pytest.param("Overloaded", "transient", id="overloaded-string"),
    pytest.param("network timeout", "transient", id="cloudflare-network-timeout-string"),
    pytest.param("Internal server error (500)", "transient", id="cloudflare-500-string"),
    pytest.param(
        ConnectionResetError(104, "Connection reset by peer"),
        "transient",
        id="builtin-connection-reset",
    ),
    pytest.param(TimeoutError(), "transient", id="builtin-timeout-error"),
    pytest.param(ReadTimeout(""), "transient", id="httpx-like-readtimeout-by-class-name"),
    pytest.param(PoolTimeout(""), "transient", id="httpx-like-timeout-subclass-by-mro"),
    pytest.param(APIConnectionError("Connection error."), "transient", id="sdk-apiconnectionerror"),
    pytest.param(
        _wrapped_transport_error(), "transient", id="providererror-raised-from-transport-error"
    ),
    pytest.param(
        "peer closed connection without sending complete message body (incomplete chunked read)",
        "transient",
        id="remote-protocol-error-text",
    ),
    # fatal
    pytest.param(
        ProviderError(
            OPENAI_QUOTA, status=429, code="insufficient_quota", type="insufficient_quota"
        ),
        "fatal",
        id="openai-insufficient_quota-is-429-but-fatal",
    ),
    pytest.param(
        {
            "type": "error",
            "sequence_number": 2,
            "error": {
                "type": "insufficient_quota",
                "code": "insufficient_quota",
                "message": OPENAI_QUOTA,
                "param": None,
            },
        },
        "fatal",
        id="openai-responses-in-stream-insufficient_quota-dict",
    ),
    pytest.param(OPENAI_QUOTA, "fatal", id="openai-quota-string"),
    pytest.param(
        ProviderError(
            AZURE_DAILY_LIMIT,
            status=429,
            code="429",
            body={"error": {"code": "429", "message": AZURE_DAILY_LIMIT}},
            headers={"retry-after": "86400"},
        ),
        "fatal",
        id="azure-429-retry-after-86400-daily-quota",
    ),
    pytest.param(AZURE_DAILY_LIMIT, "fatal", id="azure-daily-quota-text-only"),
    pytest.param(
        ProviderError(
            "This request would exceed your organization's monthly usage limit.",
            status=429,
            type="rate_limit_error",
            body={
                "type": "error",
                "error": {
                    "type": "rate_limit_error",
                    "message": "monthly spend limit",
                    "details": {"error_code": "enforced_spend_limit_reached"},
                },
            },
        ),
        "fatal",
        id="anthropic-429-enforced-spend-limit",
    ),
    pytest.param(
        ProviderError(
            OPENAI_REQUEST_TOO_LARGE_TPM, status=429, code="rate_limit_exceeded", type="tokens"
        ),
        "fatal",
        id="openai-request-too-large-for-tpm-never-fits",
    ),
    pytest.param(
        ProviderError("billing", status=402, type="billing_error"),
        "fatal",
        id="anthropic-402-billing",
    ),
    pytest.param(
        ProviderError(
            "Incorrect API key provided: sk-abc.",
            status=401,
            code="invalid_api_key",
            type="invalid_request_error",
        ),
        "fatal",
        id="openai-401-invalid_api_key",
    ),
    pytest.param(
        ProviderError("invalid x-api-key", status=401, type="authentication_error"),
        "fatal",
        id="anthropic-401-authentication_error",
    ),
    pytest.param(
        ProviderError("Permission denied", status=403, type="permission_error"),
        "fatal",
        id="anthropic-403",
    ),
    pytest.param(
        ProviderError(
            "The model `gpt-9` does not exist or you do not have access to it.",
            status=404,
            code="model_not_found",
            type="invalid_request_error",
        ),
        "fatal",
        id="openai-404-model_not_found",
    ),
    pytest.param(
        ProviderError(
            OPENAI_MAX_TOKENS_PARAM,
            status=400,
            type="invalid_request_error",
            body=openai_body(OPENAI_MAX_TOKENS_PARAM, "invalid_request_error", None, "max_tokens"),
        ),
        "fatal",
        id="openai-400-max_tokens-is-too-large",
    ),
    pytest.param(OPENAI_MAX_TOKENS_PARAM, "fatal", id="max_tokens-is-too-large-string"),
    pytest.param(
        ProviderError("messages: roles must alternate", status=400, type="invalid_request_error"),
        "fatal",
        id="anthropic-400-invalid-request-not-overflow",
    ),
    pytest.param(
        gemini_body(400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT"),
        "fatal",
        id="gemini-400-invalid-argument-dict",
    ),
    pytest.param("401 Unauthorized: invalid api key", "fatal", id="cloudflare-401-string"),
    pytest.param(
        RuntimeError('model "llama9" not found, try pulling it first'),
        "fatal",
        id="ollama-model-not-found",
    ),
    pytest.param(
        ProviderError(
            "Invalid 'user': string too long. Expected a string with maximum length 64.",
            status=400,
            code="string_above_max_length",
            type="invalid_request_error",
        ),
        "fatal",
        id="openai-400-string_above_max_length",
    ),
    # nothing recognised
    pytest.param("could not reduce the length", None, id="none-could-not-reduce-the-length"),
    pytest.param(ValueError("something odd happened"), None, id="none-plain-exception"),
    pytest.param({"finish_reason": "length"}, None, id="none-finish-reason-length"),
    pytest.param(None, None, id="none-none"),
]


@pytest.mark.parametrize(("error", "expected"), CLASSIFY_CASES)
def test_classify_error(error: Any, expected: str | None) -> None:
    assert classify_error(error) == expected


def test_real_httpx_transport_errors_are_transient() -> None:
    httpx = pytest.importorskip("httpx")
    request = httpx.Request("POST", "https://api.example.test/v1/chat/completions")
    for error in (
        httpx.ConnectError("[Errno 111] Connection refused", request=request),
        httpx.ReadTimeout("", request=request),
        httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
        httpx.PoolTimeout(""),
    ):
        assert classify_error(error) == "transient", error
    # A configuration mistake is not worth retrying.
    misconfigured = httpx.UnsupportedProtocol("Request URL has an unsupported protocol")
    assert classify_error(misconfigured) is None


# --- The plugin through a real pluggy manager -----------------------------------------------


def _manager(*plugins: object) -> pluggy.PluginManager:
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(think_core.hooks.specs)
    for plugin in plugins:
        pm.register(plugin)
    pm.check_pending()
    return pm


def test_plugin_answers_classify_chat_error() -> None:
    pm = _manager(OverflowClassifier())
    overflow = ProviderError(ANTHROPIC_OVERFLOW, status=400, type="invalid_request_error")
    assert pm.hook.classify_chat_error(error=overflow, ctx=None) == "context_overflow"
    throttled = ValueError(BEDROCK_THROTTLING)
    assert pm.hook.classify_chat_error(error=throttled, ctx=None) == "rate_limit"
    assert pm.hook.classify_chat_error(error=ValueError("something odd"), ctx=None) is None
    assert OverflowClassifier.name == "overflow_classifier"


class GatewayClassifier:
    """A custom classifier, as in the module docstring: its own gateway's wording first."""

    @hookimpl(tryfirst=True)
    def classify_chat_error(self, error: BaseException, ctx: Any) -> str | None:
        if "conversation too big for gateway" in str(error):
            return "context_overflow"
        return classify_error(error)


class Abstainer:
    @hookimpl(tryfirst=True)
    def classify_chat_error(self, error: BaseException, ctx: Any) -> str | None:
        return None


def test_custom_tryfirst_plugin_delegates() -> None:
    # Registered before the bundled one, so order comes from tryfirst/trylast, not LIFO.
    pm = _manager(GatewayClassifier(), OverflowClassifier())
    gateway = RuntimeError("upstream: conversation too big for gateway")
    assert default_context_overflow_classifier(gateway) is None  # only the custom rule knows it
    assert pm.hook.classify_chat_error(error=gateway, ctx=None) == "context_overflow"
    assert pm.hook.classify_chat_error(error=RuntimeError(OPENAI_QUOTA), ctx=None) == "fatal"
    calls = [impl.plugin_name for impl in pm.hook.classify_chat_error.get_hookimpls()]
    assert isinstance(pm.get_plugin(calls[-1]), GatewayClassifier)  # pluggy calls the last first


def test_bundled_classifier_answers_when_custom_plugin_abstains() -> None:
    pm = _manager(OverflowClassifier(), Abstainer())
    error = ProviderError("Overloaded", status=529, type="overloaded_error")
    assert pm.hook.classify_chat_error(error=error, ctx=None) == "transient"
