"""Anthropic Messages provider against a loopback server replaying recorded streams.

The streams below are byte-exact copies of recorded responses (the Anthropic SDK's and the
Vercel AI SDK's test fixtures).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply, sse_body  # noqa: F401
from tests.support.wire import FAST, ask, collect, text_of
from think_core.errors import ConfigurationError, ProviderError
from think_core.events import Finish, ReasoningDelta, TextDelta, ToolCall, ToolInputDelta, ToolInputStart
from think_core.models.anthropic import AnthropicModel
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

ANTHROPIC_TEXT = r'''event: message_start
data: {"type":"message_start","message":{"id":"msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK","type":"message","role":"assistant","content":[],"model":"claude-3-opus-latest","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":11,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":6}}

event: message_stop
data: {"type":"message_stop"}

'''

ANTHROPIC_TOOL_USE = r'''event: message_start
data: {"type":"message_start","message":{"id":"msg_019Q1hrJbZG26Fb9BQhrkHEr","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":377,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'ll check the current weather in Paris for you."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01NRLabsLyVHZPKxbKvkfSMn","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"locati"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"on\": \"P"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ar"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"is\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":65}}

event: message_stop
data: {"type":"message_stop"}

'''

ANTHROPIC_OVERLOADED_MID_STREAM = r'''data: {"type":"message_start","message":{"id":"msg_01KfpJoAEabmH2iHRRFjQMAG","type":"message","role":"assistant","content":[],"model":"claude-3-haiku-20240307","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":17,"output_tokens":1}}}

data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}

event: error
data: {"type":"error","error":{"details":null,"type":"overloaded_error","message":"Overloaded"}}

'''

ANTHROPIC_THINKING_PAYLOADS = r'''{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}
{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The previous"}}
{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" result"}}
{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":""}}
{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EvQBCkYICxgCKkAx..."}}
{"type":"content_block_stop","index":0}
'''

def claude_model(server: LoopbackServer, **kwargs: Any) -> AnthropicModel:
    kwargs.setdefault("api_key", "sk-ant-test")
    kwargs.setdefault("retry_policy", FAST)
    return AnthropicModel("claude-sonnet-4-20250514", base_url=server.url, **kwargs)


def thinking_stream() -> str:
    payloads = [json.loads(line) for line in ANTHROPIC_THINKING_PAYLOADS.splitlines()]
    start = {"type": "message_start", "message": {"id": "msg_t", "type": "message", "role": "assistant", "content": [],
             "model": "claude-opus-4", "usage": {"input_tokens": 10, "cache_read_input_tokens": 90,
                                                 "cache_creation_input_tokens": 5, "output_tokens": 1}}}
    text = [
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Done."}},
        {"type": "content_block_stop", "index": 1},
    ]
    end = [
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 20}},
        {"type": "message_stop"},
    ]
    return sse_body(start, *payloads, *text, *end, event_names=True)


# -- recorded streams ------------------------------------------------------------------------------


async def test_recorded_text_stream(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(ANTHROPIC_TEXT))
    events = await collect(claude_model(loopback), ask("Hello", system="You are terse."))
    assert [type(e) for e in events] == [TextDelta, TextDelta, TextDelta, Finish]
    assert text_of(events) == "Hello there!"
    finish = events[-1]
    assert finish.finish_reason == "stop"
    assert (finish.usage.input_tokens, finish.usage.output_tokens, finish.usage.total_tokens) == (11, 6, 17)
    assert finish.response_id == "msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK"
    assert finish.model_id == "claude-3-opus-latest"

    (sent,) = loopback.requests
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json == {
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 4096,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": "Hello"}],
        "stream": True,
    }


async def test_recorded_text_stream_split_at_odd_sizes_with_crlf(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(ANTHROPIC_TEXT.replace("\n", "\r\n"), chunk_size=13, chunk_delay=0.0005))
    events = await collect(claude_model(loopback), ask())
    assert text_of(events) == "Hello there!"
    assert events[-1].usage.output_tokens == 6


async def test_recorded_tool_use_stream(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(ANTHROPIC_TOOL_USE))
    events = await collect(claude_model(loopback), ask("What's the weather in Paris?"))
    call_id = "toolu_01NRLabsLyVHZPKxbKvkfSMn"
    assert text_of(events) == "I'll check the current weather in Paris for you."
    assert [e for e in events if isinstance(e, ToolInputStart)] == [ToolInputStart(call_id, "get_weather")]
    deltas = [e.delta for e in events if isinstance(e, ToolInputDelta)]
    assert deltas == ['{"locati', 'on": "P', "ar", 'is"}']
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert calls == [ToolCall(call_id, "get_weather", {"location": "Paris"}, '{"location": "Paris"}')]
    assert events.index(calls[0]) == len(events) - 2
    finish = events[-1]
    assert finish.finish_reason == "tool-calls"
    assert (finish.usage.input_tokens, finish.usage.output_tokens, finish.usage.cached_input_tokens) == (377, 65, 0)


async def test_recorded_overloaded_error_after_text_is_not_retried(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(ANTHROPIC_OVERLOADED_MID_STREAM), Reply.sse(ANTHROPIC_TEXT))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        await collect(claude_model(loopback), ask(), seen)
    assert seen == [TextDelta("Hello")]
    assert (info.value.type, info.value.message, info.value.status) == ("overloaded_error", "Overloaded", None)
    assert info.value.provider == "anthropic"
    assert len(loopback.requests) == 1


async def test_overloaded_event_before_any_output_is_retried(loopback: LoopbackServer) -> None:
    error_first = sse_body(
        {"type": "message_start", "message": {"id": "m", "content": [], "usage": {"input_tokens": 1}}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        event_names=True,
    )
    loopback.enqueue(Reply.sse(error_first), Reply.sse(ANTHROPIC_TEXT))
    events = await collect(claude_model(loopback), ask())
    assert text_of(events) == "Hello there!"
    assert len(loopback.requests) == 2


async def test_recorded_thinking_block(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(thinking_stream()))
    events = await collect(claude_model(loopback), ask())
    reasoning = [e for e in events if isinstance(e, ReasoningDelta)]
    assert [e.text for e in reasoning if e.text] == ["The previous", " result"]
    # The block's signature comes last, as metadata to send back with the block.
    assert reasoning[-1] == ReasoningDelta("", {"anthropic": {"signature": "EvQBCkYICxgCKkAx..."}})
    assert text_of(events) == "Done."
    usage = events[-1].usage
    # input_tokens is the whole prompt: uncached 10 + cache write 5 + cache read 90
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens, usage.total_tokens) == (105, 90, 20, 125)
    assert events[-1].provider_metadata == {"anthropic": {"cache_creation_input_tokens": 5}}


# -- request building ------------------------------------------------------------------------------


async def test_history_pairs_tool_use_and_merges_tool_results(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(ANTHROPIC_TEXT))
    weather = ToolSpec(name="get_weather", description="Get the weather",
                       parameters={"type": "object", "properties": {"location": {"type": "string"}}})
    request = ModelRequest(
        system="sys",
        messages=[
            UserMessage(content="Weather in Paris and London?"),
            AssistantMessage(
                text="Checking.",
                reasoning="not sent: no signature",
                tool_calls=[
                    ToolCallRequest(id="toolu_a", name="get_weather", input={"location": "Paris"}),
                    ToolCallRequest(id="toolu_b", name="get_weather", input={"location": "London"}),
                ],
            ),
            ToolMessage(tool_call_id="toolu_a", tool_name="get_weather", output="15C, cloudy"),
            ToolMessage(tool_call_id="toolu_b", tool_name="get_weather", output={"error": "down"}, is_error=True),
            UserMessage(content="and tomorrow?"),
        ],
        tools=[weather],
        tool_choice="auto",
        settings=CallSettings(temperature=0.5, max_output_tokens=100, stop=["X"], provider_options={"top_k": 5}),
    )
    await collect(claude_model(loopback), request)
    body = loopback.requests[0].json
    assert body["system"] == "sys"
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Paris and London?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"location": "Paris"}},
            {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"location": "London"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "15C, cloudy"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": '{"error": "down"}', "is_error": True},
            {"type": "text", "text": "and tomorrow?"},
        ]},
    ]
    assert body["tools"] == [{"name": "get_weather", "description": "Get the weather",
                              "input_schema": weather.parameters}]
    assert body["tool_choice"] == {"type": "auto"}
    assert (body["temperature"], body["max_tokens"], body["stop_sequences"], body["top_k"]) == (0.5, 100, ["X"], 5)


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ({"type": "tool", "tool_name": "t"}, {"type": "tool", "name": "t"}),
    ],
)
def test_tool_choice_mapping(choice: Any, expected: dict[str, Any]) -> None:
    model = AnthropicModel("c", api_key="k")
    assert model.build_body(ask(tools=[ToolSpec(name="t")], tool_choice=choice))["tool_choice"] == expected
    assert "tool_choice" not in model.build_body(ask(tool_choice=choice))  # no tools: nothing to choose


async def test_structured_output_is_a_forced_tool_streamed_as_text(loopback: LoopbackServer) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    stream = sse_body(
        {"type": "message_start", "message": {"id": "m1", "content": [], "model": "c", "usage": {"input_tokens": 20, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_o", "name": "answer", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
        event_names=True,
    )
    loopback.enqueue(Reply.sse(stream))
    events = await collect(claude_model(loopback), ask(output=OutputSpec(name="answer", json_schema=schema)))
    assert [type(e) for e in events] == [TextDelta, TextDelta, Finish]
    assert json.loads(text_of(events)) == {"city": "Paris"}
    assert events[-1].finish_reason == "stop"
    body = loopback.requests[0].json
    assert body["tool_choice"] == {"type": "tool", "name": "answer"}
    assert [t["name"] for t in body["tools"]] == ["answer"]
    assert body["tools"][0]["input_schema"] == schema


def test_structured_output_with_real_tools_requires_some_tool() -> None:
    schema = {"type": "object", "properties": {}}
    body = AnthropicModel("c", api_key="k").build_body(
        ask(tools=[ToolSpec(name="answer")], output=OutputSpec(name="answer", json_schema=schema))
    )
    assert [t["name"] for t in body["tools"]] == ["answer", "answer_"]  # no clash with the real tool
    assert body["tool_choice"] == {"type": "any"}


async def test_structured_output_with_a_non_object_schema_is_wrapped(loopback: LoopbackServer) -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    stream = sse_body(
        {"type": "message_start", "message": {"id": "m1", "content": [], "usage": {"input_tokens": 3}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "nums", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"value": [1, 2'}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ", 3]}"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
        event_names=True,
    )
    loopback.enqueue(Reply.sse(stream))
    events = await collect(claude_model(loopback), ask(output=OutputSpec(name="nums", json_schema=schema)))
    assert json.loads(text_of(events)) == [1, 2, 3]
    tool = loopback.requests[0].json["tools"][0]
    assert tool["input_schema"] == {"type": "object", "properties": {"value": schema}, "required": ["value"]}


# -- stream edge cases -----------------------------------------------------------------------------


async def test_tool_without_arguments_and_truncated_tool_json(loopback: LoopbackServer) -> None:
    stream = sse_body(
        {"type": "message_start", "message": {"id": "m", "content": [], "usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t0", "name": "now", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "write", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"text": "unfini'}},
        # max_tokens hit inside the block: no content_block_stop
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 50}},
        {"type": "message_stop"},
        event_names=True,
    )
    loopback.enqueue(Reply.sse(stream))
    events = await collect(claude_model(loopback), ask())
    calls = [(c.tool_call_id, c.input, c.raw_input) for c in events if isinstance(c, ToolCall)]
    assert calls == [("t0", {}, ""), ("t1", None, '{"text": "unfini')]
    assert events[-1].finish_reason == "length"


async def test_connection_closed_before_message_stop_is_incomplete(loopback: LoopbackServer) -> None:
    cut = ANTHROPIC_TEXT[: ANTHROPIC_TEXT.index("event: content_block_stop")]
    loopback.enqueue(Reply.sse(cut))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        await collect(claude_model(loopback), ask(), seen)
    assert info.value.type == "incomplete_stream"
    assert text_of(seen) == "Hello there!"
    assert len(loopback.requests) == 1


# -- HTTP errors and keys --------------------------------------------------------------------------


async def test_http_400_prompt_too_long(loopback: LoopbackServer) -> None:
    body = {"type": "error", "error": {"type": "invalid_request_error",
                                       "message": "prompt is too long: 213450 tokens > 200000 maximum"},
            "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}
    loopback.enqueue(Reply.json(body, status=400, headers={"request-id": "req_011CSHoEeqs5C35K2UUqR7Fy"}))
    with pytest.raises(ProviderError) as info:
        await collect(claude_model(loopback), ask())
    error = info.value
    assert (error.status, error.type, error.message) == (
        400, "invalid_request_error", "prompt is too long: 213450 tokens > 200000 maximum",
    )
    assert error.body == body and error.headers["request-id"] == "req_011CSHoEeqs5C35K2UUqR7Fy"
    assert len(loopback.requests) == 1


async def test_http_529_overloaded_is_retried(loopback: LoopbackServer) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    loopback.enqueue(Reply.json(overloaded, status=529), Reply.sse(ANTHROPIC_TEXT))
    events = await collect(claude_model(loopback), ask())
    assert text_of(events) == "Hello there!"
    assert len(loopback.requests) == 2


async def test_http_529_exhausting_retries_raises_overloaded(loopback: LoopbackServer) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    loopback.enqueue(*[Reply.json(overloaded, status=529) for _ in range(3)])
    with pytest.raises(ProviderError) as info:
        await collect(claude_model(loopback), ask())
    assert (info.value.status, info.value.type) == (529, "overloaded_error")
    assert len(loopback.requests) == 3


def test_missing_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-sonnet-4-5")


async def test_env_key_and_base_url(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", loopback.url)
    loopback.enqueue(Reply.sse(ANTHROPIC_TEXT))
    await collect(AnthropicModel("claude-x"), ask())
    assert loopback.requests[0].headers["x-api-key"] == "sk-ant-env"
