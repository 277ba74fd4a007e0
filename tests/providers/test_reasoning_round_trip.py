"""What a provider needs back with its own reasoning goes back: Anthropic's signed thinking
blocks (without them, a tool-use step with thinking enabled is refused) and Gemini's thought
signatures on function calls — within a turn, from the stored history in the next turn, and
after a step replayed from the journal."""

from __future__ import annotations

import json
from typing import Any

from tests.loopback import LoopbackServer, Reply, sse_body
from tests.support.agents import make_agent
from tests.support.gemini import chunk, crlf_stream, gemini_model
from tests.support.wire import an_stream, anthropic_model
from think_core import tool
from think_core.messages import to_model_messages
from think_core.models.anthropic import AnthropicModel
from think_core.models.base import AssistantMessage, ModelRequest, ReasoningBlock, ToolCallRequest, UserMessage
from think_core.turn.journal import _STEP_FIELDS
from think_core.turn.ui_stream import AssistantMessageBuilder
from think_core.types import StepResult


@tool(read_only=True)
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"12C and rain in {city}"


def thinking_then_tool(signature: str, *, redacted: str | None = None) -> str:
    """A step as Anthropic streams it with thinking on: a signed thinking block (and a redacted
    one), then a tool call."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
                                              "model": "claude", "usage": {"input_tokens": 20, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "The user wants"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": " the weather."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": signature}},
        {"type": "content_block_stop", "index": 0},
    ]
    index = 1
    if redacted is not None:
        events += [{"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": redacted}},
                   {"type": "content_block_stop", "index": 1}]
        index = 2
    events += [
        {"type": "content_block_start", "index": index,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": index,
         "delta": {"type": "input_json_delta", "partial_json": json.dumps({"city": "Paris"})}},
        {"type": "content_block_stop", "index": index},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}},
        {"type": "message_stop"},
    ]
    return sse_body(*events, event_names=True)


def answer(text: str) -> str:
    return an_stream({"type": "text", "text": text}, stop="end_turn", input_tokens=40, output_tokens=5)


def assistant_turns(body: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [m["content"] for m in body["messages"] if m["role"] == "assistant"]


async def test_anthropic_gets_its_signed_thinking_back_within_the_turn_and_in_the_next(
    loopback: LoopbackServer, tmp_path: Any
) -> None:
    loopback.enqueue(Reply.sse(thinking_then_tool("sig-1", redacted="opaque==")), Reply.sse(answer("Rainy.")),
                     Reply.sse(answer("You are welcome.")))
    agent = make_agent(anthropic_model(loopback), tools=[get_weather], store=str(tmp_path / "t.db"))
    session = agent.session("s")
    first = await session.chat("Weather in Paris?")
    assert first.status == "completed" and first.text == "Rainy."
    thinking = {"type": "thinking", "thinking": "The user wants the weather.", "signature": "sig-1"}
    redacted = {"type": "redacted_thinking", "data": "opaque=="}
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    # The second step of the turn: the tool-use step comes back whole, thinking first.
    assert assistant_turns(loopback.requests[1].json) == [[thinking, redacted, tool_use]]

    # The stored message keeps it (and a client is served the same parts), so the next turn's
    # history sends it again, now from the store.
    await session.chat("Thanks!")
    history = assistant_turns(loopback.requests[2].json)
    assert history[0] == [thinking, redacted, tool_use]
    assert history[1] == [{"type": "text", "text": "Rainy."}]
    stored = [p for m in await session.messages() for p in m.parts if p.get("type") == "reasoning"]
    assert [p.get("providerMetadata") for p in stored] == [
        {"anthropic": {"signature": "sig-1"}}, {"anthropic": {"redactedData": "opaque=="}}]


def test_reasoning_from_another_provider_is_not_sent_as_thinking() -> None:
    request = ModelRequest(messages=[
        UserMessage(content="hi"),
        AssistantMessage(text="Hello.", reasoning="unsigned",
                         reasoning_blocks=[ReasoningBlock(text="unsigned", provider_metadata={"openai": {"id": "rs_1"}})]),
        UserMessage(content="again"),
    ])
    body = AnthropicModel("claude", api_key="k").build_body(request)
    assert body["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]}


def test_the_builder_keeps_metadata_with_the_block_it_ends() -> None:
    chunks: list[dict[str, Any]] = []
    builder = AssistantMessageBuilder("m", chunks.append)
    builder.start_step()
    builder.reasoning_delta("first")
    builder.reasoning_delta("", {"anthropic": {"signature": "a"}})
    builder.reasoning_delta("second")  # a new block: the signature ended the first
    builder.reasoning_delta("", {"anthropic": {"signature": "b"}})
    builder.reasoning_delta("", {"anthropic": {"redactedData": "r"}})
    assert builder.step_reasoning() == [("first", {"anthropic": {"signature": "a"}}),
                                        ("second", {"anthropic": {"signature": "b"}}),
                                        ("", {"anthropic": {"redactedData": "r"}})]
    builder.finish_step()
    parts = [p for p in builder.message().parts if p["type"] == "reasoning"]
    assert [(p["text"], p["providerMetadata"]) for p in parts] == [
        ("first", {"anthropic": {"signature": "a"}}), ("second", {"anthropic": {"signature": "b"}}),
        ("", {"anthropic": {"redactedData": "r"}})]
    assert [c["delta"] for c in chunks if c["type"] == "reasoning-delta"] == ["first", "second"]  # no empty deltas
    model_messages = to_model_messages([builder.message()])
    assert [b.provider_metadata for b in model_messages[0].reasoning_blocks] == [p["providerMetadata"] for p in parts]


def test_a_journaled_step_keeps_its_reasoning_blocks_and_call_signatures() -> None:
    step = StepResult(session=None, request_id="r", step_number=0, reasoning_text="x",
                      reasoning_blocks=[ReasoningBlock(text="x", provider_metadata={"anthropic": {"signature": "s"}})],
                      tool_calls=[ToolCallRequest(id="c", name="t", provider_metadata={"google": {"thoughtSignature": "g"}})])
    stored = json.loads(json.dumps(step.model_dump(mode="json", include=_STEP_FIELDS)))
    again = StepResult(session=None, request_id="r", **stored)
    assert again.reasoning_blocks == step.reasoning_blocks and again.tool_calls == step.tool_calls


async def test_gemini_gets_its_thought_signatures_back_on_the_calls(loopback: LoopbackServer, tmp_path: Any) -> None:
    loopback.enqueue(
        Reply.sse(crlf_stream(chunk({"functionCall": {"id": "fc-1", "name": "get_weather", "args": {"city": "Paris"}},
                                     "thoughtSignature": "sig-paris"},
                                    {"functionCall": {"id": "fc-2", "name": "get_weather", "args": {"city": "Rome"}}},
                                    finish="STOP", usage=(10, 5, 20)))),
        Reply.sse(crlf_stream(chunk({"text": "Rain in both."}, finish="STOP", usage=(30, 4, 0)))),
        Reply.sse(crlf_stream(chunk({"text": "Bye."}, finish="STOP", usage=(40, 2, 0)))),
    )
    agent = make_agent(gemini_model(loopback, "gemini-3-pro-preview"), tools=[get_weather], store=str(tmp_path / "g.db"))
    session = agent.session("s")
    assert (await session.chat("Paris and Rome?")).text == "Rain in both."
    await session.chat("Thanks")
    for request in (loopback.requests[1], loopback.requests[2]):  # in the turn, then from the store
        model_parts = [c["parts"] for c in request.json["contents"] if c["role"] == "model"][0]
        # Gemini's own signature on the call it signed; the second of parallel calls has none.
        assert [p.get("thoughtSignature") for p in model_parts] == ["sig-paris", None]
