"""OpenAI Responses API provider against a loopback server.

The quota-error stream is the Vercel AI SDK's recorded ``openai-error.1`` fixture (payloads
verbatim, with the ``event:`` lines the wire carries); the in-stream overflow error is a
captured real one. Text, function-call and reasoning-summary streams
follow the documented event sequence and the recorded fixtures' shapes (``parallel-tool-call``,
``azure-gpt5-reasoning-multi-summary``), shortened.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply, sse_body  # noqa: F401
from tests.support.responses import (
    call_events,
    completed,
    created,
    message_events,
    named,
    reasoning_events,
    responses_model,
    text_stream,
)
from tests.support.wire import ask, collect, text_of
from think_core.errors import ConfigurationError, ProviderError
from think_core.events import Finish, ReasoningDelta, TextDelta, ToolCall, ToolInputDelta, ToolInputStart
from think_core.models.base import (
    AssistantMessage,
    CallSettings,
    ModelRequest,
    OutputSpec,
    ToolCallRequest,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from think_core.models.openai_responses import OpenAIResponsesModel
from think_core.models.resolve import resolve_model
from think_plugins.overflow import classify_error

RESPONSES_QUOTA_ERROR_PAYLOADS = [
    r'''{"type":"response.created","sequence_number":0,"response":{"id":"resp_05500b38c2cd9bfc00691c7c9d222481a3b595421266dab424","object":"response","created_at":1763474589,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"max_tool_calls":null,"model":"gpt-5-nano-2025-08-07","output":[],"parallel_tool_calls":true,"previous_response_id":null,"prompt_cache_key":null,"prompt_cache_retention":null,"reasoning":{"effort":"medium","summary":null},"safety_identifier":null,"service_tier":"auto","store":true,"temperature":1,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_logprobs":0,"top_p":1,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}''',  # noqa: E501
    r'''{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_05500b38c2cd9bfc00691c7c9d222481a3b595421266dab424","object":"response","created_at":1763474589,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"max_tool_calls":null,"model":"gpt-5-nano-2025-08-07","output":[],"parallel_tool_calls":true,"previous_response_id":null,"prompt_cache_key":null,"prompt_cache_retention":null,"reasoning":{"effort":"medium","summary":null},"safety_identifier":null,"service_tier":"auto","store":true,"temperature":1,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_logprobs":0,"top_p":1,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}''',  # noqa: E501
    r'''{"type":"error","sequence_number":2,"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","param":null}}''',  # noqa: E501
    r'''{"type":"response.failed","sequence_number":3,"response":{"id":"resp_05500b38c2cd9bfc00691c7c9d222481a3b595421266dab424","object":"response","created_at":1763474589,"status":"failed","background":false,"error":{"code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."},"incomplete_details":null,"instructions":null,"max_output_tokens":null,"max_tool_calls":null,"model":"gpt-5-nano-2025-08-07","output":[],"parallel_tool_calls":true,"previous_response_id":null,"prompt_cache_key":null,"prompt_cache_retention":null,"reasoning":{"effort":"medium","summary":null},"safety_identifier":null,"service_tier":"auto","store":true,"temperature":1,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_logprobs":0,"top_p":1,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}''',  # noqa: E501
]

RESPONSES_OVERFLOW_EVENT = {
    "type": "error", "sequence_number": 2,
    "error": {"type": "invalid_request_error", "code": "context_length_exceeded",
              "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
              "param": "input"},
}

# -- streams ---------------------------------------------------------------------------------------


async def test_text_stream_split_at_odd_sizes(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(text_stream("Hello", " there", "!"), chunk_size=11))
    events = await collect(responses_model(loopback), ask("Hello", system="Be terse."))
    assert [type(e) for e in events] == [TextDelta, TextDelta, TextDelta, Finish]
    assert text_of(events) == "Hello there!"
    finish = events[-1]
    assert (finish.finish_reason, finish.response_id, finish.model_id) == ("stop", "resp_t", "gpt-5-mini-2025-08-07")
    assert (finish.usage.input_tokens, finish.usage.output_tokens, finish.usage.total_tokens) == (12, 4, 16)

    (sent,) = loopback.requests
    assert (sent.method, sent.path) == ("POST", "/v1/responses")
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.json == {"model": "gpt-5-mini", "input": [{"role": "user", "content": "Hello"}], "stream": True,
                         "store": False, "instructions": "Be terse."}


async def test_parallel_function_calls_and_reasoning_summaries(loopback: LoopbackServer) -> None:
    stream = named(
        created(),
        *reasoning_events(["**Two", " cities**"], ["Call both."]),
        *call_events(1, "call_p", "get_weather", '{"city": "Paris"}'),
        *call_events(2, "call_r", "get_weather", '{"city": "Rome"}'),
        completed(30, 50, reasoning=32, cached=8),
    )
    loopback.enqueue(Reply.sse(stream))
    events = await collect(responses_model(loopback, reasoning={"effort": "low", "summary": "auto"}), ask())
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "**Two cities**\n\nCall both."
    assert [e for e in events if isinstance(e, ToolInputStart)] == [
        ToolInputStart("call_p", "get_weather"), ToolInputStart("call_r", "get_weather"),
    ]
    assert [e.delta for e in events if isinstance(e, ToolInputDelta) and e.tool_call_id == "call_r"] == [
        '{"city":', ' "Rome"}',
    ]
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert calls == [ToolCall("call_p", "get_weather", {"city": "Paris"}, '{"city": "Paris"}'),
                     ToolCall("call_r", "get_weather", {"city": "Rome"}, '{"city": "Rome"}')]
    finish = events[-1]
    assert finish.finish_reason == "tool-calls"
    usage = finish.usage
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens, usage.cached_input_tokens) == (30, 50, 32, 8)
    assert loopback.requests[0].json["reasoning"] == {"effort": "low", "summary": "auto"}


async def test_call_without_added_event_and_refusal_text(loopback: LoopbackServer) -> None:
    done_only = call_events(0, "call_n", "now", "")[-1]
    refusal = {"type": "response.refusal.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0,
               "delta": "I can't help with that."}
    loopback.enqueue(Reply.sse(named(created(), done_only, refusal, completed(5, 5))))
    events = await collect(responses_model(loopback), ask())
    assert events[:2] == [ToolInputStart("call_n", "now"), ToolCall("call_n", "now", {}, "")]
    assert text_of(events) == "I can't help with that."


async def test_incomplete_response_cut_by_max_output_tokens(loopback: LoopbackServer) -> None:
    cut_call = call_events(0, "call_w", "write", '{"text": "unfinished')[:2]  # no item done
    loopback.enqueue(Reply.sse(named(created(), *cut_call, completed(9, 64, status="incomplete",
                                                                     incomplete="max_output_tokens"))))
    events = await collect(responses_model(loopback), ask())
    assert [(c.tool_call_id, c.input, c.raw_input) for c in events if isinstance(c, ToolCall)] == [
        ("call_w", None, '{"text": "'),  # the first half of the arguments streamed
    ]
    assert events[-1].finish_reason == "length"


async def test_stream_closed_before_completed_is_incomplete(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(named(created(), *message_events("Hello"))))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        await collect(responses_model(loopback), ask(), seen)
    assert info.value.type == "incomplete_stream" and text_of(seen) == "Hello"
    assert len(loopback.requests) == 1


# -- request building ------------------------------------------------------------------------------


def test_history_tools_output_and_settings_mapping() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    request = ModelRequest(
        system="sys",
        messages=[
            UserMessage(content="Weather in Paris and London?"),
            AssistantMessage(text="Checking.", reasoning="not replayed", tool_calls=[
                ToolCallRequest(id="call_a", name="get_weather", input={"city": "Paris"}),
                ToolCallRequest(id="call_b", name="get_weather", input={"city": "London"}),
            ]),
            ToolMessage(tool_call_id="call_a", tool_name="get_weather", output="15C"),
            ToolMessage(tool_call_id="call_b", tool_name="get_weather", output={"error": "down"}, is_error=True),
        ],
        tools=[ToolSpec(name="get_weather", description="Get the weather", parameters=schema)],
        tool_choice={"type": "tool", "tool_name": "get_weather"},
        output=OutputSpec(name="Weather report", json_schema=schema),
        settings=CallSettings(temperature=0.3, top_p=0.8, max_output_tokens=99, provider_options={"truncation": "auto"}),
    )
    body = OpenAIResponsesModel("gpt-5", api_key="k").build_body(request)
    assert body["input"] == [
        {"role": "user", "content": "Weather in Paris and London?"},
        {"role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": '{"city": "London"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "15C"},
        {"type": "function_call_output", "call_id": "call_b", "output": '{"error": "down"}'},
    ]
    assert body["instructions"] == "sys"
    assert body["tools"] == [{"type": "function", "name": "get_weather", "description": "Get the weather",
                              "parameters": schema, "strict": False}]
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert body["text"] == {"format": {"type": "json_schema", "name": "Weather_report", "schema": schema,
                                       "strict": False}}
    assert (body["temperature"], body["top_p"], body["max_output_tokens"], body["truncation"]) == (0.3, 0.8, 99, "auto")
    assert "tool_choice" not in OpenAIResponsesModel("gpt-5", api_key="k").build_body(ask(tool_choice="required"))


# -- errors and retries ----------------------------------------------------------------------------


async def test_recorded_quota_error_event_is_fatal_and_not_retried(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(named(*RESPONSES_QUOTA_ERROR_PAYLOADS)), Reply.sse(text_stream("never")))
    with pytest.raises(ProviderError) as info:
        await collect(responses_model(loopback), ask())
    error = info.value
    assert (error.code, error.type, error.status) == ("insufficient_quota", "insufficient_quota", None)
    assert error.message.startswith("You exceeded your current quota")
    assert classify_error(error) == "fatal"
    assert len(loopback.requests) == 1


async def test_in_stream_overflow_error_is_classified(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(named(created(), RESPONSES_OVERFLOW_EVENT)))
    with pytest.raises(ProviderError) as info:
        await collect(responses_model(loopback), ask())
    assert info.value.code == "context_length_exceeded"
    assert classify_error(info.value) == "context_overflow"
    assert len(loopback.requests) == 1


async def test_flat_server_error_before_output_is_retried_and_failed_after_output_raises(
    loopback: LoopbackServer,
) -> None:
    flat = {"type": "error", "code": "server_error", "message": "The server had an error.", "param": None,
            "sequence_number": 1}
    loopback.enqueue(Reply.sse(named(created(), flat)), Reply.sse(text_stream("Recovered")))
    assert text_of(await collect(responses_model(loopback), ask())) == "Recovered"
    assert len(loopback.requests) == 2

    failed = {"type": "response.failed", "response": {"id": "resp_t", "status": "failed",
                                                      "error": {"code": "server_error", "message": "Upstream failed."}}}
    loopback.enqueue(Reply.sse(named(created(), *message_events("Partial")[:3], failed)))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        await collect(responses_model(loopback), ask(), seen)
    assert seen == [TextDelta("Partial")]
    assert (info.value.code, info.value.message) == ("server_error", "Upstream failed.")
    assert len(loopback.requests) == 3


async def test_http_429_is_retried_with_retry_after_ms(loopback: LoopbackServer) -> None:
    body = {"error": {"message": "Rate limit reached for gpt-5-mini.", "type": "tokens", "param": None,
                      "code": "rate_limit_exceeded"}}
    loopback.enqueue(Reply.json(body, status=429, headers={"retry-after-ms": "20"}), Reply.sse(text_stream("ok")))
    assert text_of(await collect(responses_model(loopback), ask())) == "ok"
    assert len(loopback.requests) == 2


# -- keys and model strings ------------------------------------------------------------------------


async def test_model_string_uses_the_openai_credentials(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        resolve_model("openai-responses:gpt-5-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.url + "/v1")
    model = resolve_model("openai-responses:gpt-5-mini")
    assert isinstance(model, OpenAIResponsesModel)
    loopback.enqueue(Reply.sse(text_stream("hi")))
    assert text_of(await collect(model, ask())) == "hi"
    assert loopback.requests[0].path == "/v1/responses"
    assert loopback.requests[0].headers["authorization"] == "Bearer sk-env"
