"""Gemini ``streamGenerateContent?alt=sse`` provider against a loopback server.

The text stream is a captured real response (published in simonw/llm-gemini
#97); the tool-call, reasoning and blocked-prompt payloads are the Vercel AI SDK's recorded
fixtures (``google-tool-call``, ``google-reasoning``, ``issue-19758-prompt-block``; thought
signatures shortened), framed with CRLF as Gemini frames them. Parallel calls and thought parts
follow the documented chunk shape; error bodies are the captured Google error shapes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply  # noqa: F401
from tests.support.gemini import GEMINI_TEXT, GEMINI_TEXT_ANSWER, GEMINI_TEXT_PAYLOADS, chunk, crlf_stream, gemini_model
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
from think_core.models.gemini import GeminiModel
from think_core.models.resolve import resolve_model
from think_plugins.overflow import classify_error

GEMINI_TOOL_CALL_PAYLOADS = [
    r'''{"candidates":[{"content":{"parts":[{"functionCall":{"name":"weather","args":{"location":"San Francisco"}},"thoughtSignature":"EqUCCqICAb4+9vsh..."}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":29,"candidatesTokenCount":15,"totalTokenCount":89,"promptTokensDetails":[{"modality":"TEXT","tokenCount":29}],"thoughtsTokenCount":45},"modelVersion":"gemini-3-pro-preview","responseId":"b36LacjwM668nsEP2tbsgQQ"}''',  # noqa: E501
    r'''{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":29,"candidatesTokenCount":15,"totalTokenCount":89,"promptTokensDetails":[{"modality":"TEXT","tokenCount":29}],"thoughtsTokenCount":45},"modelVersion":"gemini-3-pro-preview","responseId":"b36LacjwM668nsEP2tbsgQQ"}''',  # noqa: E501
]

GEMINI_REASONING_LAST = r'''{"candidates":[{"content":{"parts":[{"text":"","thoughtSignature":"Eo0HCooHAb4+9vutXdtKMt..."}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":29,"totalTokenCount":294,"promptTokensDetails":[{"modality":"TEXT","tokenCount":9}],"thoughtsTokenCount":256},"modelVersion":"gemini-3-pro-preview","responseId":"dX6LadKVC7SZ28oPr9yJoQs"}'''  # noqa: E501

GEMINI_PROMPT_BLOCKED = r'''{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":9,"totalTokenCount":9,"promptTokensDetails":[{"modality":"TEXT","tokenCount":9}],"serviceTier":"standard"},"modelVersion":"gemini-3.7-flash","responseId":"EXCPatOAKMrQjMcPteHVmQo"}'''  # noqa: E501

GEMINI_OVERFLOW = {"error": {"code": 400, "message": "The input token count (1200293) exceeds the maximum number of "
                             "tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}


def gemini_429(delay: str) -> dict[str, Any]:
    """The recorded 429 (Vercel ``google-429-retry-info.json``) with its ``retryDelay`` set."""
    return {"error": {"code": 429, "message": "You exceeded your current quota, please check your plan.",
                      "status": "RESOURCE_EXHAUSTED", "details": [
                          {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                           "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
                          {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}]}}


# -- recorded streams ------------------------------------------------------------------------------


async def test_recorded_text_stream_crlf_split_at_odd_sizes(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(GEMINI_TEXT, chunk_size=17))
    events = await collect(gemini_model(loopback), ask("Say hi in five languages", system="Be terse."))
    assert text_of(events) == GEMINI_TEXT_ANSWER
    assert [type(e) for e in events] == [TextDelta, TextDelta, Finish]
    finish = events[-1]
    assert finish.finish_reason == "stop" and finish.provider_metadata is None
    usage = finish.usage  # thinking tokens are output tokens, as OpenAI counts reasoning tokens
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens, usage.total_tokens) == (5, 230, 186, 235)
    assert (finish.response_id, finish.model_id) == ("AdVRaMmDCYekqtsPrb_-iAw", "models/gemini-2.5-flash-preview-05-20")

    (sent,) = loopback.requests
    assert (sent.method, sent.path) == ("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert sent.headers["x-goog-api-key"] == "AIza-test" and "authorization" not in sent.headers
    assert sent.json == {
        "contents": [{"role": "user", "parts": [{"text": "Say hi in five languages"}]}],
        "systemInstruction": {"parts": [{"text": "Be terse."}]},
    }


async def test_recorded_tool_call_arrives_whole(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(crlf_stream(*GEMINI_TOOL_CALL_PAYLOADS)))
    events = await collect(gemini_model(loopback, "gemini-3-pro-preview"), ask("Weather in SF?"))
    start, delta, call, finish = events
    assert isinstance(start, ToolInputStart) and start.tool_name == "weather"
    assert start.tool_call_id.startswith("call_")  # Gemini gave no id: one is made up
    assert delta == ToolInputDelta(start.tool_call_id, '{"location": "San Francisco"}')
    assert call == ToolCall(start.tool_call_id, "weather", {"location": "San Francisco"}, '{"location": "San Francisco"}',
                            {"google": {"thoughtSignature": "EqUCCqICAb4+9vsh..."}})  # kept, to be sent back
    assert finish.finish_reason == "tool-calls"  # Gemini says STOP after a function call
    assert (finish.usage.input_tokens, finish.usage.output_tokens, finish.usage.total_tokens) == (29, 60, 89)


async def test_parallel_calls_thought_parts_and_server_ids(loopback: LoopbackServer) -> None:
    stream = crlf_stream(
        chunk({"text": "**Planning** both cities", "thought": True}),
        chunk({"text": " at once.", "thought": True}),
        chunk({"functionCall": {"id": "fc-1", "name": "get_weather", "args": {"city": "Paris"}}},
              {"functionCall": {"id": "fc-2", "name": "get_weather", "args": {"city": "Rome"}}},
              finish="STOP", usage=(40, 12, 30)),
    )
    loopback.enqueue(Reply.sse(stream))
    events = await collect(gemini_model(loopback), ask("Paris and Rome?"))
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "**Planning** both cities at once."
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.tool_call_id, c.input) for c in calls] == [("fc-1", {"city": "Paris"}), ("fc-2", {"city": "Rome"})]
    assert [e.tool_call_id for e in events if isinstance(e, ToolInputStart)] == ["fc-1", "fc-2"]
    assert events[-1].finish_reason == "tool-calls"
    assert events[-1].usage.reasoning_tokens == 30


async def test_recorded_reasoning_tail_with_only_a_signature_maps_to_nothing(loopback: LoopbackServer) -> None:
    stream = crlf_stream(chunk({"text": "There are **3** \"r\"s."}), GEMINI_REASONING_LAST)
    loopback.enqueue(Reply.sse(stream))
    events = await collect(gemini_model(loopback), ask())
    assert [type(e) for e in events] == [TextDelta, Finish]
    assert events[-1].usage.reasoning_tokens == 256


@pytest.mark.parametrize(
    ("payload", "reason", "raw"),
    [
        (GEMINI_PROMPT_BLOCKED, "content-filter", "PROHIBITED_CONTENT"),
        (json.dumps(chunk({"text": "partial"}, finish="SAFETY")), "content-filter", "SAFETY"),
        (json.dumps(chunk({"text": "partial"}, finish="MAX_TOKENS")), "length", "MAX_TOKENS"),
        (json.dumps(chunk(finish="MALFORMED_FUNCTION_CALL")), "other", "MALFORMED_FUNCTION_CALL"),
    ],
)
async def test_safety_and_finish_reasons(loopback: LoopbackServer, payload: str, reason: str, raw: str) -> None:
    loopback.enqueue(Reply.sse(crlf_stream(payload)))
    events = await collect(gemini_model(loopback), ask())
    finish = events[-1]
    assert (finish.finish_reason, finish.provider_metadata) == (reason, {"google": {"finish_reason": raw}})


async def test_stream_cut_before_the_finish_reason_is_incomplete(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(crlf_stream(GEMINI_TEXT_PAYLOADS[0])))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        await collect(gemini_model(loopback), ask(), seen)
    assert info.value.type == "incomplete_stream" and text_of(seen).startswith("Here you go!")
    assert len(loopback.requests) == 1  # output had been streamed: not retried


# -- request building ------------------------------------------------------------------------------


def history_request(**kwargs: Any) -> ModelRequest:
    return ModelRequest(
        system="sys",
        messages=[
            UserMessage(content="Weather in Paris and London?"),
            AssistantMessage(text="Checking.", tool_calls=[
                ToolCallRequest(id="c1", name="get_weather", input={"city": "Paris"}),
                ToolCallRequest(id="c2", name="get_weather", input={"city": "London"}),
            ]),
            ToolMessage(tool_call_id="c1", tool_name="get_weather", output="15C, cloudy"),
            ToolMessage(tool_call_id="c2", tool_name="get_weather", output={"reason": "down"}, is_error=True),
            UserMessage(content="and tomorrow?"),
        ],
        tools=[ToolSpec(name="get_weather", description="Get the weather",
                        parameters={"type": "object", "properties": {"city": {"type": "string"}},
                                    "additionalProperties": False})],
        **kwargs,
    )


def test_history_maps_calls_and_merges_parallel_results() -> None:
    request = history_request(
        tool_choice="required",
        settings=CallSettings(temperature=0.2, top_p=0.9, max_output_tokens=100, stop=["X"], seed=7,
                              provider_options={"generationConfig": {"topK": 5}, "safetySettings": []}),
    )
    body = GeminiModel("gemini-2.5-flash", api_key="k", thinking={"includeThoughts": True}).build_body(request)
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris and London?"}]},
        {"role": "model", "parts": [
            {"text": "Checking."},
            {"functionCall": {"id": "c1", "name": "get_weather", "args": {"city": "Paris"}}},
            {"functionCall": {"id": "c2", "name": "get_weather", "args": {"city": "London"}}},
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "c1", "name": "get_weather", "response": {"output": "15C, cloudy"}}},
            {"functionResponse": {"id": "c2", "name": "get_weather", "response": {"error": {"reason": "down"}}}},
        ]},
        {"role": "user", "parts": [{"text": "and tomorrow?"}]},
    ]
    assert body["systemInstruction"] == {"parts": [{"text": "sys"}]}
    assert body["tools"] == [{"functionDeclarations": [{
        "name": "get_weather", "description": "Get the weather",
        "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}},
                                 "additionalProperties": False},
    }]}]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert body["generationConfig"] == {"temperature": 0.2, "topP": 0.9, "maxOutputTokens": 100, "stopSequences": ["X"],
                                        "seed": 7, "thinkingConfig": {"includeThoughts": True}, "topK": 5}
    assert body["safetySettings"] == []


def test_gemini_3_replays_calls_with_the_validator_skipping_signature() -> None:
    contents = GeminiModel("models/gemini-3-pro-preview", api_key="k").build_body(history_request())["contents"]
    signatures = [part.get("thoughtSignature") for part in contents[1]["parts"]]
    assert signatures == [None, "skip_thought_signature_validator", None]  # the first call of the step only
    old = GeminiModel("gemini-2.5-pro", api_key="k").build_body(history_request())["contents"]
    assert all("thoughtSignature" not in part for part in old[1]["parts"])


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ({"type": "tool", "tool_name": "t"}, {"mode": "ANY", "allowedFunctionNames": ["t"]}),
    ],
)
def test_tool_choice_mapping(choice: Any, expected: dict[str, Any]) -> None:
    model = GeminiModel("g", api_key="k")
    assert model.build_body(ask(tools=[ToolSpec(name="t")], tool_choice=choice))["toolConfig"] == {
        "functionCallingConfig": expected
    }
    assert "toolConfig" not in model.build_body(ask(tool_choice=choice))


async def test_structured_output_uses_the_json_schema(loopback: LoopbackServer) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    loopback.enqueue(Reply.sse(crlf_stream(chunk({"text": '{"city": '}), chunk({"text": '"Oslo"}'}, finish="STOP"))))
    events = await collect(gemini_model(loopback), ask(output=OutputSpec(name="answer", json_schema=schema)))
    assert json.loads(text_of(events)) == {"city": "Oslo"}
    config = loopback.requests[0].json["generationConfig"]
    assert config == {"responseMimeType": "application/json", "responseJsonSchema": schema}


# -- errors and retries ----------------------------------------------------------------------------


async def test_http_400_overflow_is_classified_and_not_retried(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json(GEMINI_OVERFLOW, status=400, headers={"content-type": "application/json; charset=UTF-8"}))
    with pytest.raises(ProviderError) as info:
        await collect(gemini_model(loopback), ask())
    error = info.value
    assert (error.status, error.type, error.code, error.provider) == (400, "INVALID_ARGUMENT", "400", "google")
    assert error.message.startswith("The input token count (1200293) exceeds")
    assert classify_error(error) == "context_overflow"
    assert len(loopback.requests) == 1


async def test_http_429_waits_for_the_retry_delay_in_the_body(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json(gemini_429("0.05s"), status=429), Reply.sse(GEMINI_TEXT))
    events = await collect(gemini_model(loopback), ask())
    assert text_of(events) == GEMINI_TEXT_ANSWER
    assert len(loopback.requests) == 2


async def test_http_429_with_a_retry_delay_past_the_cap_is_raised_at_once(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json(gemini_429("3600s"), status=429), Reply.sse(GEMINI_TEXT))
    with pytest.raises(ProviderError) as info:
        await collect(gemini_model(loopback), ask())
    assert (info.value.status, info.value.type) == (429, "RESOURCE_EXHAUSTED")
    assert len(loopback.requests) == 1
    assert classify_error(info.value) == "fatal"  # an hour's wait: no retry budget covers it
    assert classify_error(ProviderError("x", status=429, body=gemini_429("34.4s"))) == "rate_limit"


async def test_http_503_unavailable_is_retried(loopback: LoopbackServer) -> None:
    unavailable = {"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                             "status": "UNAVAILABLE"}}
    loopback.enqueue(Reply.json(unavailable, status=503), Reply.sse(GEMINI_TEXT))
    assert text_of(await collect(gemini_model(loopback), ask())) == GEMINI_TEXT_ANSWER
    assert len(loopback.requests) == 2


async def test_error_chunk_before_output_is_retried_and_after_output_is_raised(loopback: LoopbackServer) -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                       "status": "UNAVAILABLE"}}
    loopback.enqueue(Reply.sse(crlf_stream(error)), Reply.sse(GEMINI_TEXT))
    assert text_of(await collect(gemini_model(loopback), ask())) == GEMINI_TEXT_ANSWER
    assert len(loopback.requests) == 2

    loopback.enqueue(Reply.sse(crlf_stream(chunk({"text": "Partial"}), error)), Reply.sse(GEMINI_TEXT))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        await collect(gemini_model(loopback), ask(), seen)
    assert seen == [TextDelta("Partial")]
    assert (info.value.type, info.value.code, info.value.status) == ("UNAVAILABLE", "503", None)
    assert classify_error(info.value) == "transient"
    assert len(loopback.requests) == 3


# -- keys and model strings ------------------------------------------------------------------------


def test_keys_from_either_variable_and_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match="GEMINI_API_KEY"):
        GeminiModel("gemini-2.5-flash")
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google")
    assert GeminiModel("g").default_headers() == {"x-goog-api-key": "from-google"}
    monkeypatch.setenv("GEMINI_API_KEY", "from-gemini")
    assert GeminiModel("g").default_headers() == {"x-goog-api-key": "from-gemini"}
    assert GeminiModel("g", api_key="").default_headers() == {}


async def test_model_string_reads_the_environment(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-env")
    monkeypatch.setenv("GOOGLE_BASE_URL", loopback.url + "/v1beta/")
    model = resolve_model("google:gemini-2.5-flash")
    assert isinstance(model, GeminiModel) and model.provider == "google"
    loopback.enqueue(Reply.sse(GEMINI_TEXT))
    assert text_of(await collect(model, ask())) == GEMINI_TEXT_ANSWER
    assert loopback.requests[0].path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert loopback.requests[0].headers["x-goog-api-key"] == "AIza-env"
