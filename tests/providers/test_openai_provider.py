"""OpenAI Chat Completions provider against a loopback server replaying recorded streams.

The streams below are byte-exact copies of recorded provider responses
(openai-python's and the Vercel AI SDK's test fixtures).
"""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from typing import Any

import httpx
import pytest

from tests.loopback import LoopbackServer, Reply, sse_body  # noqa: F401
from tests.support.wire import FAST, ask, collect, text_of
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
from think_core.models.openai import OpenAIChatModel

OPENAI_TEXT_LENGTH = r'''data: {"id":"chatcmpl-ABfw3Oqj8RD0z6aJiiX37oTjV2HFh","object":"chat.completion.chunk","created":1727346171,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_7568d46099","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfw3Oqj8RD0z6aJiiX37oTjV2HFh","object":"chat.completion.chunk","created":1727346171,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_7568d46099","choices":[{"index":0,"delta":{"content":"{\""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfw3Oqj8RD0z6aJiiX37oTjV2HFh","object":"chat.completion.chunk","created":1727346171,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_7568d46099","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}

data: {"id":"chatcmpl-ABfw3Oqj8RD0z6aJiiX37oTjV2HFh","object":"chat.completion.chunk","created":1727346171,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_7568d46099","choices":[],"usage":{"prompt_tokens":79,"completion_tokens":1,"total_tokens":80,"completion_tokens_details":{"reasoning_tokens":0}}}

data: [DONE]

'''

OPENAI_TEXT_OBFUSCATED = r'''data: {"id":"chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0","object":"chat.completion.chunk","created":1770933892,"model":"gpt-4.1-nano-2025-04-14","service_tier":"default","system_fingerprint":"fp_de604bd877","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Qup1BsQ3"}

data: {"id":"chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0","object":"chat.completion.chunk","created":1770933892,"model":"gpt-4.1-nano-2025-04-14","service_tier":"default","system_fingerprint":"fp_de604bd877","choices":[{"index":0,"delta":{"content":"**"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"yhjoJbEF"}

data: {"id":"chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0","object":"chat.completion.chunk","created":1770933892,"model":"gpt-4.1-nano-2025-04-14","service_tier":"default","system_fingerprint":"fp_de604bd877","choices":[{"index":0,"delta":{"content":"Holiday"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"dTh"}

: ... 297 more content chunks elided (same shape) ...

data: {"id":"chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0","object":"chat.completion.chunk","created":1770933892,"model":"gpt-4.1-nano-2025-04-14","service_tier":"default","system_fingerprint":"fp_de604bd877","choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"RIdwxH030"}

data: {"id":"chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0","object":"chat.completion.chunk","created":1770933892,"model":"gpt-4.1-nano-2025-04-14","service_tier":"default","system_fingerprint":"fp_de604bd877","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null,"obfuscation":"zap0"}

data: {"id":"chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0","object":"chat.completion.chunk","created":1770933892,"model":"gpt-4.1-nano-2025-04-14","service_tier":"default","system_fingerprint":"fp_de604bd877","choices":[],"usage":{"prompt_tokens":16,"completion_tokens":300,"total_tokens":316,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"obfuscation":"h9RiQLL"}

data: [DONE]

'''

OPENAI_TEXT_MINIMAL = r'''data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}

data: [DONE]

'''

OPENAI_PARALLEL_TOOLS = r'''data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"role":"assistant","content":null},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_JMW1whyEaYG438VE1OIflxA2","type":"function","function":{"name":"GetWeatherArgs","arguments":""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\": "}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Edinb"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"urgh"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\", \"c"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ountry"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\": \""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"GB\", "}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"units"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\": \""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"c\"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_DNYTawLBoN8fj3KN6qU9N1Ou","type":"function","function":{"name":"get_stock_price","arguments":""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"ti"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"cker\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":": \"AAP"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"L\", "}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"exch"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"ange\":"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":" \"NA"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"SDAQ\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[],"usage":{"prompt_tokens":149,"completion_tokens":60,"total_tokens":209,"completion_tokens_details":{"reasoning_tokens":0}}}

data: [DONE]

'''

OPENAI_ERROR_AFTER_OUTPUT = r'''data: {"id":"chatcmpl-error-after-output","object":"chat.completion.chunk","created":1702657020,"model":"gpt-3.5-turbo-0613","system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}

data: {"error":{"message":"stream failed after output","type":"server_error","param":null,"code":null}}

data: [DONE]

'''

def make_model(server: LoopbackServer, **kwargs: Any) -> OpenAIChatModel:
    kwargs.setdefault("api_key", "sk-test")
    kwargs.setdefault("retry_policy", FAST)
    return OpenAIChatModel("gpt-4o", base_url=server.url + "/v1", **kwargs)


def compat_chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-x", "object": "chat.completion.chunk", "model": "compat-model", "choices": choices, **extra}


# -- recorded streams ------------------------------------------------------------------------------


async def test_recorded_text_stream_with_usage(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(OPENAI_TEXT_LENGTH))
    events = await collect(make_model(loopback), ask("Say JSON", system="You are terse."))

    assert text_of(events) == '{"'
    finish = events[-1]
    assert isinstance(finish, Finish) and sum(isinstance(e, Finish) for e in events) == 1
    assert finish.finish_reason == "length"
    assert (finish.usage.input_tokens, finish.usage.output_tokens, finish.usage.total_tokens) == (79, 1, 80)
    assert finish.usage.reasoning_tokens == 0
    assert finish.response_id == "chatcmpl-ABfw3Oqj8RD0z6aJiiX37oTjV2HFh"
    assert finish.model_id == "gpt-4o-2024-08-06"

    (sent,) = loopback.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-test"
    body = sent.json
    assert body["model"] == "gpt-4o"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say JSON"},
    ]
    assert "tools" not in body and "tool_choice" not in body and "response_format" not in body


async def test_recorded_stream_with_obfuscation_and_comment(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(OPENAI_TEXT_OBFUSCATED))
    events = await collect(make_model(loopback), ask())
    assert text_of(events) == "**Holiday."
    finish = events[-1]
    assert finish.finish_reason == "stop"
    assert (finish.usage.input_tokens, finish.usage.output_tokens, finish.usage.total_tokens) == (16, 300, 316)
    assert finish.usage.cached_input_tokens == 0
    assert finish.provider_metadata == {"openai": {"system_fingerprint": "fp_de604bd877"}}


@pytest.mark.parametrize(
    "framing",
    ["per-event", "7-byte chunks", "1-byte chunks", "crlf 5-byte chunks"],
)
async def test_recorded_minimal_stream_any_framing(loopback: LoopbackServer, framing: str) -> None:
    stream = OPENAI_TEXT_MINIMAL
    if framing == "per-event":
        reply = Reply.sse(stream)
    elif framing == "7-byte chunks":
        reply = Reply.sse(stream, chunk_size=7)
    elif framing == "1-byte chunks":
        reply = Reply.sse(stream, chunk_size=1)
    else:
        reply = Reply.sse(stream.replace("\n", "\r\n"), chunk_size=5, chunk_delay=0.0005)
    loopback.enqueue(reply)
    events = await collect(make_model(loopback), ask())
    assert [type(e) for e in events] == [TextDelta, Finish]
    assert events[0].text == "Hello"
    assert events[1].finish_reason == "stop"
    assert (events[1].usage.input_tokens, events[1].usage.output_tokens, events[1].usage.total_tokens) == (9, 1, 10)


async def test_recorded_parallel_tool_calls(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(OPENAI_PARALLEL_TOOLS))
    tools = [
        ToolSpec(
            name="GetWeatherArgs",
            description="Weather for a city",
            parameters={
                "type": "object",
                "properties": {"city": {"type": "string"}, "country": {"type": "string"}, "units": {"type": "string"}},
                "required": ["city", "country", "units"],
            },
        ),
        ToolSpec(
            name="get_stock_price",
            parameters={"type": "object", "properties": {"ticker": {"type": "string"}, "exchange": {"type": "string"}}},
        ),
    ]
    request = ModelRequest(
        messages=[
            UserMessage(content="What's the weather like in Edinburgh?"),
            UserMessage(content="What's the price of AAPL?"),
        ],
        tools=tools,
        tool_choice="required",
    )
    events = await collect(make_model(loopback), request)

    first, second = "call_JMW1whyEaYG438VE1OIflxA2", "call_DNYTawLBoN8fj3KN6qU9N1Ou"
    starts = [e for e in events if isinstance(e, ToolInputStart)]
    assert [(s.tool_call_id, s.tool_name) for s in starts] == [(first, "GetWeatherArgs"), (second, "get_stock_price")]
    deltas = {cid: "".join(e.delta for e in events if isinstance(e, ToolInputDelta) and e.tool_call_id == cid)
              for cid in (first, second)}
    assert deltas[first] == '{"city": "Edinburgh", "country": "GB", "units": "c"}'
    assert deltas[second] == '{"ticker": "AAPL", "exchange": "NASDAQ"}'
    # a call's start precedes its deltas
    assert events.index(starts[1]) < min(
        i for i, e in enumerate(events) if isinstance(e, ToolInputDelta) and e.tool_call_id == second
    )

    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.tool_call_id, c.tool_name, c.input) for c in calls] == [
        (first, "GetWeatherArgs", {"city": "Edinburgh", "country": "GB", "units": "c"}),
        (second, "get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"}),
    ]
    assert calls[0].raw_input == deltas[first]
    assert isinstance(events[-1], Finish) and events.index(calls[-1]) < len(events) - 1
    assert events[-1].finish_reason == "tool-calls"
    usage = events[-1].usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (149, 60, 209)
    assert text_of(events) == ""

    body = loopback.requests[0].json
    assert body["tool_choice"] == "required"
    assert body["tools"] == [
        {"type": "function", "function": {"name": "GetWeatherArgs", "description": "Weather for a city",
                                          "parameters": tools[0].parameters}},
        {"type": "function", "function": {"name": "get_stock_price", "parameters": tools[1].parameters}},
    ]
    assert [m["content"] for m in body["messages"]] == [
        "What's the weather like in Edinburgh?",
        "What's the price of AAPL?",
    ]


async def test_recorded_error_after_output_raises_after_the_text(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(OPENAI_ERROR_AFTER_OUTPUT))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        async with aclosing(make_model(loopback).stream(ask())) as stream:
            async for event in stream:
                seen.append(event)
    assert text_of(seen) == "Hello"
    assert info.value.message == "stream failed after output"
    assert info.value.type == "server_error"
    assert info.value.status is None
    assert info.value.provider == "openai"
    assert len(loopback.requests) == 1  # output had been streamed: never retried


# -- request building ------------------------------------------------------------------------------


async def test_history_pairs_tool_results_with_call_ids(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(OPENAI_TEXT_MINIMAL))
    request = ModelRequest(
        system="sys",
        messages=[
            UserMessage(content="weather and stock?"),
            AssistantMessage(
                text="",
                reasoning="thinking that is not sent back",
                tool_calls=[
                    ToolCallRequest(id="call_a", name="weather", input={"city": "Edinburgh"}),
                    ToolCallRequest(id="call_b", name="stock", input={}),
                ],
            ),
            ToolMessage(tool_call_id="call_a", tool_name="weather", output={"temp": 12, "sky": "rain"}),
            ToolMessage(tool_call_id="call_b", tool_name="stock", output="boom", is_error=True),
            AssistantMessage(text="It rains."),
            UserMessage(content="thanks"),
        ],
        tools=[ToolSpec(name="weather"), ToolSpec(name="stock")],
    )
    await collect(make_model(loopback), request)
    messages = loopback.requests[0].json["messages"]
    assert messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "weather and stock?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Edinburgh"}'}},
                {"id": "call_b", "type": "function", "function": {"name": "stock", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '{"temp": 12, "sky": "rain"}'},
        {"role": "tool", "tool_call_id": "call_b", "content": "boom"},
        {"role": "assistant", "content": "It rains."},
        {"role": "user", "content": "thanks"},
    ]
    assert json.loads(messages[2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Edinburgh"}


async def test_tool_choice_output_and_settings_mapping(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(OPENAI_TEXT_MINIMAL))
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    request = ask(
        tools=[ToolSpec(name="lookup")],
        tool_choice={"type": "tool", "tool_name": "lookup"},
        output=OutputSpec(name="final answer!", json_schema=schema),
        settings=CallSettings(
            temperature=0.2,
            top_p=0.9,
            max_output_tokens=123,
            stop=["END"],
            seed=7,
            headers={"x-trace": "abc"},
            provider_options={"reasoning_effort": "low", "parallel_tool_calls": False},
        ),
    )
    await collect(make_model(loopback), request)
    sent = loopback.requests[0]
    body = sent.json
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "final_answer_", "schema": schema}}
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["stop"], body["seed"]) == (
        0.2, 0.9, 123, ["END"], 7,
    )
    assert "max_completion_tokens" not in body
    assert body["reasoning_effort"] == "low" and body["parallel_tool_calls"] is False
    assert sent.headers["x-trace"] == "abc"


async def test_max_tokens_param_and_tool_choice_without_tools(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(OPENAI_TEXT_MINIMAL))
    model = make_model(loopback, max_tokens_param="max_completion_tokens", headers={"OpenAI-Project": "p1"})
    await collect(model, ask(tool_choice="none", settings=CallSettings(max_output_tokens=50)))
    sent = loopback.requests[0]
    assert sent.json["max_completion_tokens"] == 50 and "max_tokens" not in sent.json
    assert "tool_choice" not in sent.json  # OpenAI rejects tool_choice without tools
    assert sent.headers["openai-project"] == "p1"


# -- compatible-server quirks ----------------------------------------------------------------------


async def test_tool_calls_without_index_are_assembled_by_id(loopback: LoopbackServer) -> None:
    stream = sse_body(
        compat_chunk({"role": "assistant", "content": None}),
        compat_chunk({"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "a", "arguments": '{"x"'}}]}),
        compat_chunk({"tool_calls": [{"function": {"arguments": ": 1}"}}]}),
        compat_chunk({"tool_calls": [{"id": "c2", "type": "function", "function": {"name": "b", "arguments": '{"y": 2}'}}]}),
        compat_chunk({}, "tool_calls"),
        done=True,
    )
    loopback.enqueue(Reply.sse(stream))
    events = await collect(make_model(loopback), ask())
    calls = [(e.tool_call_id, e.tool_name, e.input) for e in events if isinstance(e, ToolCall)]
    assert calls == [("c1", "a", {"x": 1}), ("c2", "b", {"y": 2})]
    assert events[-1].finish_reason == "tool-calls"


async def test_repeated_id_and_name_in_every_delta_are_not_doubled(loopback: LoopbackServer) -> None:
    repeat = lambda args: compat_chunk({"tool_calls": [{"index": 0, "id": "c9", "type": "function",  # noqa: E731
                                                 "function": {"name": "lookup", "arguments": args}}]})
    loopback.enqueue(Reply.sse(sse_body(repeat('{"q": '), repeat('"x"}'), compat_chunk({}, "tool_calls"), done=True)))
    events = await collect(make_model(loopback), ask())
    assert [e for e in events if isinstance(e, ToolInputStart)] == [ToolInputStart("c9", "lookup")]
    assert [e for e in events if isinstance(e, ToolCall)] == [ToolCall("c9", "lookup", {"q": "x"}, '{"q": "x"}')]


async def test_arguments_that_are_not_a_json_object_give_input_none(loopback: LoopbackServer) -> None:
    stream = sse_body(
        compat_chunk({"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "t", "arguments": "[1, 2]"}}]}),
        compat_chunk({"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "t", "arguments": '{"broken": '}}]}),
        compat_chunk({"tool_calls": [{"index": 2, "id": "c2", "function": {"name": "t", "arguments": ""}}]}),
        compat_chunk({"tool_calls": [{"index": 3, "id": "c3", "function": {"name": "t", "arguments": '"str"'}}]}),
        compat_chunk({}, "tool_calls"),
        done=True,
    )
    loopback.enqueue(Reply.sse(stream))
    events = await collect(make_model(loopback), ask())
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.tool_call_id, c.input, c.raw_input) for c in calls] == [
        ("c0", None, "[1, 2]"),
        ("c1", None, '{"broken": '),
        ("c2", {}, ""),
        ("c3", None, '"str"'),
    ]


async def test_reasoning_fields_usage_details_and_azure_empty_choices(loopback: LoopbackServer) -> None:
    stream = sse_body(
        {"choices": [], "created": 0, "id": "", "model": "", "object": "", "prompt_filter_results": []},
        compat_chunk({"role": "assistant", "reasoning_content": "Deep"}),  # DeepSeek / vLLM
        compat_chunk({"reasoning": "Seek"}),  # OpenRouter / newer vLLM
        compat_chunk({"content": "Answer"}),
        compat_chunk(
            {},
            "stop",
            usage={
                "prompt_tokens": 100,
                "completion_tokens": 40,
                "total_tokens": 140,
                "prompt_tokens_details": {"cached_tokens": 64},
                "completion_tokens_details": {"reasoning_tokens": 30},
            },
        ),
        done=True,
    )
    loopback.enqueue(Reply.sse(stream))
    events = await collect(make_model(loopback), ask())
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["Deep", "Seek"]
    assert text_of(events) == "Answer"
    usage = events[-1].usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (100, 40, 140)
    assert (usage.cached_input_tokens, usage.reasoning_tokens) == (64, 30)
    assert events[-1].model_id == "compat-model"


async def test_compat_server_reporting_stop_after_tool_calls_and_no_done(loopback: LoopbackServer) -> None:
    # the whole arguments string at once, "stop" as finish reason, usage on the finish chunk, no [DONE]
    stream = sse_body(
        compat_chunk({"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "t", "arguments": '{"a": 1}'}}]}),
        compat_chunk({}, "stop", usage={"prompt_tokens": 5, "completion_tokens": 2}),
    )
    loopback.enqueue(Reply.sse(stream))
    events = await collect(make_model(loopback), ask())
    assert [type(e) for e in events] == [ToolInputStart, ToolInputDelta, ToolCall, Finish]
    assert events[-1].finish_reason == "tool-calls"
    assert events[-1].usage.total_tokens == 7


async def test_stream_closed_before_finish_after_output_is_an_error_not_retried(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(sse_body(compat_chunk({"content": "partial"}))))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        async with aclosing(make_model(loopback).stream(ask())) as stream:
            async for event in stream:
                seen.append(event)
    assert text_of(seen) == "partial"
    assert info.value.type == "incomplete_stream"
    assert len(loopback.requests) == 1


# -- HTTP errors and keys --------------------------------------------------------------------------


OVERFLOW_BODY = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in "
        "204308 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


async def test_http_error_body_is_parsed(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json(OVERFLOW_BODY, status=400, headers={"x-request-id": "req_1"}))
    with pytest.raises(ProviderError) as info:
        await collect(make_model(loopback), ask())
    error = info.value
    assert error.status == 400
    assert error.code == "context_length_exceeded"
    assert error.type == "invalid_request_error"
    assert error.message == OVERFLOW_BODY["error"]["message"]
    assert error.body == OVERFLOW_BODY
    assert error.headers["x-request-id"] == "req_1"
    assert str(error).startswith("openai HTTP 400: This model's maximum context length")
    assert len(loopback.requests) == 1


@pytest.mark.parametrize(
    ("body", "message", "code", "etype"),
    [
        ({"object": "error", "message": "bad vllm", "type": "BadRequestError", "param": None, "code": 400},
         "bad vllm", "400", "BadRequestError"),
        ({"error": "model 'x' not found"}, "model 'x' not found", None, None),  # Ollama
        ({"message": "openrouter says no", "code": 400, "metadata": {"provider_name": None}},
         "openrouter says no", "400", None),
    ],
)
async def test_compatible_error_shapes(
    loopback: LoopbackServer, body: dict[str, Any], message: str, code: str | None, etype: str | None
) -> None:
    loopback.enqueue(Reply.json(body, status=400))
    with pytest.raises(ProviderError) as info:
        await collect(make_model(loopback), ask())
    assert (info.value.message, info.value.code, info.value.type) == (message, code, etype)


async def test_non_json_error_body(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply(status=404, headers={"content-type": "text/plain"}, body=b"no such route"))
    with pytest.raises(ProviderError) as info:
        await collect(make_model(loopback), ask())
    assert (info.value.status, info.value.message, info.value.body) == (404, "no such route", "no such route")


async def test_json_error_with_status_200(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json({"error": {"message": "upstream failed", "type": "invalid_request_error"}}))
    with pytest.raises(ProviderError, match="upstream failed"):
        await collect(make_model(loopback), ask())


def test_missing_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIChatModel("gpt-4o")
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIChatModel("m", base_url="https://api.groq.com/openai/v1")
    assert OpenAIChatModel("m", base_url="https://example.com/v1", api_key="").model_id == "m"


async def test_keyless_local_server_and_env_key(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    loopback.enqueue(Reply.sse(OPENAI_TEXT_MINIMAL), Reply.sse(OPENAI_TEXT_MINIMAL))
    await collect(OpenAIChatModel("llama", base_url=loopback.url + "/v1"), ask())
    assert "authorization" not in loopback.requests[0].headers
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.url + "/v1")
    await collect(OpenAIChatModel("gpt-4o"), ask())
    assert loopback.requests[1].headers["authorization"] == "Bearer sk-env"


async def test_azure_style_query_and_header(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(OPENAI_TEXT_MINIMAL))
    model = OpenAIChatModel(
        "dep",
        base_url=loopback.url + "/openai/deployments/dep",
        api_key="",
        headers={"api-key": "azure-key"},
        query={"api-version": "2024-10-21"},
    )
    await collect(model, ask())
    sent = loopback.requests[0]
    assert sent.path == "/openai/deployments/dep/chat/completions?api-version=2024-10-21"
    assert sent.headers["api-key"] == "azure-key" and "authorization" not in sent.headers


async def test_shared_client_is_used_and_left_open(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(OPENAI_TEXT_MINIMAL), Reply.sse(OPENAI_TEXT_MINIMAL))
    async with httpx.AsyncClient(headers={"x-client": "shared"}) as client:
        model = make_model(loopback, client=client)
        await collect(model, ask())
        await collect(model, ask())
        assert not client.is_closed
    assert [r.headers["x-client"] for r in loopback.requests] == ["shared", "shared"]


# -- cancellation ----------------------------------------------------------------------------------


def slow_stream(n: int = 40) -> str:
    return sse_body(*[compat_chunk({"content": f"t{i} "}) for i in range(n)], compat_chunk({}, "stop"), done=True)


async def test_closing_the_stream_early_closes_the_http_response(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(slow_stream(), chunk_delay=0.05))
    async with aclosing(make_model(loopback).stream(ask())) as stream:
        first = await stream.__anext__()
    assert first == TextDelta("t0 ")
    await loopback.wait_abandoned(timeout=3)
    assert len(loopback.incomplete) == 1


async def test_cancelling_the_consumer_task_closes_the_http_response(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(slow_stream(), chunk_delay=0.05))
    got_first = asyncio.Event()

    async def consume() -> None:
        async with aclosing(make_model(loopback).stream(ask())) as stream:
            async for _ in stream:
                got_first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_first.wait(), 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await loopback.wait_abandoned(timeout=3)


# -- resolve_model ---------------------------------------------------------------------------------


def test_resolve_model_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    from think_core.models.anthropic import AnthropicModel
    from think_core.models.resolve import resolve_model

    monkeypatch.setenv("OPENAI_API_KEY", "sk-o")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-a")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_COMPATIBLE_API_KEY", raising=False)

    openai = resolve_model("openai:gpt-4o-mini")
    assert isinstance(openai, OpenAIChatModel)
    assert (openai.model_id, openai.provider, openai.base_url) == ("gpt-4o-mini", "openai", "https://api.openai.com/v1")

    claude = resolve_model("anthropic:claude-sonnet-4-5")
    assert isinstance(claude, AnthropicModel) and claude.model_id == "claude-sonnet-4-5"

    local = resolve_model("openai-compatible:llama3.2@http://localhost:11434/v1")
    assert isinstance(local, OpenAIChatModel)
    assert (local.model_id, local.base_url, local.provider) == ("llama3.2", "http://localhost:11434/v1", "openai-compatible")
    assert local._api_key == ""  # OPENAI_API_KEY is never forwarded to a third-party URL

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert resolve_model("openai:x").base_url == "http://127.0.0.1:9/v1"


async def test_resolve_model_passes_the_client(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from think_core.models.resolve import resolve_model

    loopback.enqueue(Reply.sse(OPENAI_TEXT_MINIMAL))
    async with httpx.AsyncClient(headers={"x-shared": "1"}) as client:
        model = resolve_model(f"openai-compatible:org/model@v2@{loopback.url}/v1", client=client)
        assert model.model_id == "org/model@v2"
        events = await collect(model, ask())
    assert text_of(events) == "Hello"
    assert loopback.requests[0].headers["x-shared"] == "1"
    assert loopback.requests[0].json["model"] == "org/model@v2"


def test_resolve_model_passes_model_objects_through() -> None:
    from think_core.models.resolve import resolve_model

    class Duck:
        model_id = "duck"
        provider = "test"

        def stream(self, request: ModelRequest) -> Any:
            raise NotImplementedError

    duck = Duck()
    assert resolve_model(duck) is duck
    real = OpenAIChatModel("m", base_url="http://localhost:1/v1")
    assert resolve_model(real) is real
    with pytest.raises(ConfigurationError):
        resolve_model(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("gpt-4o", "provider:name"),
        ("openai:", "provider:name"),
        ("mystery:model", "unknown model provider 'mystery'"),
        ("openai-compatible:llama", "NAME@URL"),
    ],
)
def test_resolve_model_rejects_bad_strings(spec: str, match: str) -> None:
    from think_core.models.resolve import resolve_model

    with pytest.raises(ConfigurationError, match=match):
        resolve_model(spec)


@pytest.mark.parametrize(("spec", "var"), [("openai:gpt-4o", "OPENAI_API_KEY"), ("anthropic:claude", "ANTHROPIC_API_KEY")])
def test_resolve_model_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch, spec: str, var: str) -> None:
    from think_core.models.resolve import resolve_model

    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match=var):
        resolve_model(spec)


def test_register_model_prefix() -> None:
    from think_core.models.resolve import _FACTORIES, register_model_prefix, resolve_model

    sentinel = OpenAIChatModel("s", base_url="http://localhost:1/v1")
    register_model_prefix("test-only", lambda rest, client: sentinel if rest == "x" else None)
    try:
        assert resolve_model("test-only:x") is sentinel
    finally:
        _FACTORIES.pop("test-only")
