"""Whole turns through ``Think`` with the real HTTP providers against a loopback server:
text, tool execution between two provider responses, structured output and errors."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tests.loopback import LoopbackServer, Reply, sse_body  # noqa: F401
from tests.support.wire import an_stream, anthropic_model, oa_chunk, oa_text, oa_tool_call, openai_model
from think_core import TurnConfig, hookimpl, tool
from think_core.agent import Think


def weather_tool(calls: list[str]):
    @tool(read_only=True)
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"12C and rain in {city}"

    return get_weather


async def test_openai_text_turn(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(oa_text("Hello", " there", usage=(12, 3))))
    agent = Think(model=openai_model(loopback), system="Be brief.", store=":memory:", load_entrypoints=False)
    try:
        result = await agent.session("s").chat("hi")
    finally:
        agent.close()
    assert result.status == "completed"
    assert result.text == "Hello there"
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.total_tokens) == (12, 3, 15)
    body = loopback.requests[0].json
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


async def test_openai_tool_turn_sends_the_result_paired_with_the_call(loopback: LoopbackServer) -> None:
    calls: list[str] = []
    loopback.enqueue(
        Reply.sse(oa_tool_call("call_w1", "get_weather", '{"city": "Edinburgh"}', usage=(20, 8))),
        Reply.sse(oa_text("It is 12C and raining.", usage=(40, 7))),
    )
    agent = Think(model=openai_model(loopback), tools=[weather_tool(calls)], store=":memory:", load_entrypoints=False)
    try:
        result = await agent.session("s").chat("Weather in Edinburgh?")
    finally:
        agent.close()
    assert result.status == "completed"
    assert result.text == "It is 12C and raining."
    assert calls == ["Edinburgh"]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (60, 15)
    assert len(loopback.requests) == 2

    first = loopback.requests[0].json
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather"]
    assert first["tools"][0]["function"]["parameters"]["properties"]["city"]["type"] == "string"

    second = loopback.requests[1].json["messages"]
    assistant = next(m for m in second if m["role"] == "assistant")
    assert assistant["tool_calls"] == [
        {"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Edinburgh"}'}}
    ]
    tool_messages = [m for m in second if m["role"] == "tool"]
    assert len(tool_messages) == 1
    assert tool_messages[0]["tool_call_id"] == "call_w1"
    assert "12C and rain in Edinburgh" in tool_messages[0]["content"]
    assert second.index(assistant) + 1 == second.index(tool_messages[0])


async def test_anthropic_tool_turn_sends_tool_result_blocks(loopback: LoopbackServer) -> None:
    calls: list[str] = []
    loopback.enqueue(
        Reply.sse(an_stream({"type": "text", "text": "Checking."},
                            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                            stop="tool_use", input_tokens=30, output_tokens=12)),
        Reply.sse(an_stream({"type": "text", "text": "Rainy in Paris."}, stop="end_turn", input_tokens=50,
                            output_tokens=6)),
    )
    agent = Think(model=anthropic_model(loopback), tools=[weather_tool(calls)], store=":memory:", load_entrypoints=False)
    try:
        result = await agent.session("s").chat("Weather in Paris?")
    finally:
        agent.close()
    assert result.status == "completed"
    assert result.text.endswith("Rainy in Paris.")
    assert calls == ["Paris"]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (80, 18)

    first = loopback.requests[0].json
    assert first["tools"][0]["name"] == "get_weather" and "input_schema" in first["tools"][0]
    messages = loopback.requests[1].json["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}} in messages[1]["content"]
    result_block = messages[2]["content"][0]
    assert result_block["type"] == "tool_result" and result_block["tool_use_id"] == "toolu_1"
    assert "12C and rain in Paris" in result_block["content"]
    assert "is_error" not in result_block


async def test_anthropic_structured_output_turn(loopback: LoopbackServer) -> None:
    class Weather(BaseModel):
        city: str
        temperature_c: float

    class AskForOutput:
        name = "ask_for_output"

        @hookimpl
        def before_turn(self, ctx: Any) -> TurnConfig:
            return TurnConfig(output=Weather)

    loopback.enqueue(Reply.sse(an_stream(
        {"type": "tool_use", "id": "toolu_o", "name": "Weather", "input": {"city": "Oslo", "temperature_c": -3.5}},
        stop="tool_use", input_tokens=15, output_tokens=9,
    )))
    agent = Think(model=anthropic_model(loopback), plugins=[AskForOutput()], store=":memory:", load_entrypoints=False)
    try:
        result = await agent.session("s").chat("Weather in Oslo?")
    finally:
        agent.close()
    assert result.status == "completed"
    assert result.output == Weather(city="Oslo", temperature_c=-3.5)
    body = loopback.requests[0].json
    assert body["tool_choice"] == {"type": "tool", "name": "Weather"}


async def test_openai_structured_output_turn(loopback: LoopbackServer) -> None:
    class Answer(BaseModel):
        value: int

    class AskForOutput:
        name = "ask_for_output"

        @hookimpl
        def before_turn(self, ctx: Any) -> TurnConfig:
            return TurnConfig(output=Answer)

    loopback.enqueue(Reply.sse(oa_text('{"val', 'ue": 42}')))
    agent = Think(model=openai_model(loopback), plugins=[AskForOutput()], store=":memory:", load_entrypoints=False)
    try:
        result = await agent.session("s").chat("answer?")
    finally:
        agent.close()
    assert result.output == Answer(value=42)
    response_format = loopback.requests[0].json["response_format"]
    assert response_format["type"] == "json_schema" and response_format["json_schema"]["name"] == "Answer"


async def test_http_401_ends_the_turn_with_an_error(loopback: LoopbackServer) -> None:
    body = {"error": {"message": "Incorrect API key provided: sk-test.", "type": "invalid_request_error",
                      "code": "invalid_api_key"}}
    loopback.enqueue(Reply.json(body, status=401), Reply.sse(oa_text("never")))
    agent = Think(model=openai_model(loopback), store=":memory:", load_entrypoints=False)
    try:
        result = await agent.session("s").chat("hi")
    finally:
        agent.close()
    assert result.status == "error"
    assert "Incorrect API key provided" in (result.error or "")
    assert len(loopback.requests) == 1


async def test_error_after_output_keeps_the_partial_text(loopback: LoopbackServer) -> None:
    stream = sse_body(
        oa_chunk({"content": "Partial"}),
        {"error": {"message": "stream failed after output", "type": "server_error", "param": None, "code": None}},
        done=True,
    )
    loopback.enqueue(Reply.sse(stream), Reply.sse(oa_text("never")))
    agent = Think(model=openai_model(loopback), store=":memory:", load_entrypoints=False)
    try:
        session = agent.session("s")
        result = await session.chat("hi")
        stored = (await session.messages())[-1]
    finally:
        agent.close()
    assert result.status == "error"
    assert "stream failed after output" in (result.error or "")
    assert stored.role == "assistant" and stored.text == "Partial"
    assert len(loopback.requests) == 1


async def test_models_from_strings_reuse_one_connection_across_steps(loopback: LoopbackServer, monkeypatch):
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", "sk-local")
    loopback.enqueue(Reply.sse(oa_tool_call("call_p", "ping", "{}")), Reply.sse(oa_text("pong received")))
    agent = Think(f"openai-compatible:local-model@{loopback.url}/v1", tools=[ping], load_entrypoints=False)
    result = await agent.session("s").chat("ping?")
    assert result.status == "completed" and result.text == "pong received"
    assert len(loopback.requests) == 2
    assert loopback.connections == 1  # the second step reused the first step's connection
    assert loopback.requests[0].headers["authorization"] == "Bearer sk-local"
    await agent.aclose()
