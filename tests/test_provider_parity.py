"""The four HTTP providers give the same turns: the same scenario — reasoning, two parallel tool
calls, an answer; an error after partial text; an HTTP error — is scripted in each provider's
own wire format on a loopback server, run through ``Think``, and the ``TurnResult`` and the
stored UI message must come out identical once call ids are numbered."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply, sse_body  # noqa: F401
from think_core import tool
from think_core.agent import Think
from think_core.models.anthropic import AnthropicModel
from think_core.models.gemini import GeminiModel
from think_core.models.openai import OpenAIChatModel
from think_core.models.openai_responses import OpenAIResponsesModel
from think_core.models.retry import RetryPolicy

FAST = RetryPolicy(max_retries=2, initial_delay=0.01, max_delay=0.02)
CALLS = [("c_paris", {"city": "Paris"}), ("c_rome", {"city": "Rome"})]
THOUGHT = ["Two cities:", " call both."]
ANSWER = ["Paris 12C,", " Rome 20C."]


@dataclass
class Wire:
    """One provider's wire format for the scenario's steps."""

    model: Callable[[str], Any]
    tool_step: Callable[[], str]  # reasoning + two parallel calls, usage (20 in, 10 out)
    text_step: Callable[[], str]  # the answer, usage (40 in, 6 out)
    broken_step: Callable[[], str]  # "Partial" then an in-stream error
    http_error: Callable[[], Reply]  # an invalid-key answer


# -- OpenAI Chat Completions ---------------------------------------------------------------------


def _oa(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-p", "object": "chat.completion.chunk", "model": "gpt-4o", "choices": choices, **extra}


def _oa_usage(prompt: int, completion: int) -> dict[str, Any]:
    return _oa(None, usage={"prompt_tokens": prompt, "completion_tokens": completion,
                            "total_tokens": prompt + completion})


OPENAI = Wire(
    model=lambda url: OpenAIChatModel("gpt-4o", base_url=url + "/v1", api_key="sk", retry_policy=FAST),
    tool_step=lambda: sse_body(
        *[_oa({"reasoning_content": t}) for t in THOUGHT],
        *[_oa({"tool_calls": [{"index": n, "id": cid, "type": "function",
                               "function": {"name": "get_weather", "arguments": json.dumps(args)}}]})
          for n, (cid, args) in enumerate(CALLS)],
        _oa({}, "tool_calls"), _oa_usage(20, 10), done=True),
    text_step=lambda: sse_body(*[_oa({"content": t}) for t in ANSWER], _oa({}, "stop"), _oa_usage(40, 6), done=True),
    broken_step=lambda: sse_body(_oa({"content": "Partial"}),
                                 {"error": {"message": "stream broke", "type": "server_error", "code": None}}),
    http_error=lambda: Reply.json({"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                                             "code": "invalid_api_key"}}, status=401),
)


# -- OpenAI Responses ----------------------------------------------------------------------------


def _rs_done(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {"type": "response.completed", "response": {
        "id": "resp_p", "status": "completed", "model": "gpt-5",
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "total_tokens": input_tokens + output_tokens}}}


def _rs_text(*pieces: str) -> list[dict[str, Any]]:
    return [{"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0,
             "delta": t} for t in pieces]


def _rs_calls() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for n, (cid, args) in enumerate(CALLS, start=1):
        item = {"type": "function_call", "id": f"fc_{n}", "call_id": cid, "name": "get_weather", "arguments": ""}
        events += [
            {"type": "response.output_item.added", "output_index": n, "item": item},
            {"type": "response.function_call_arguments.delta", "item_id": f"fc_{n}", "output_index": n,
             "delta": json.dumps(args)},
            {"type": "response.output_item.done", "output_index": n, "item": {**item, "arguments": json.dumps(args)}},
        ]
    return events


RESPONSES = Wire(
    model=lambda url: OpenAIResponsesModel("gpt-5", base_url=url + "/v1", api_key="sk", retry_policy=FAST),
    tool_step=lambda: sse_body(
        *[{"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 0,
           "delta": t} for t in THOUGHT],
        *_rs_calls(), _rs_done(20, 10), event_names=True),
    text_step=lambda: sse_body(*_rs_text(*ANSWER), _rs_done(40, 6), event_names=True),
    broken_step=lambda: sse_body(*_rs_text("Partial"), {"type": "error", "code": "server_error",
                                                        "message": "stream broke", "param": None}, event_names=True),
    http_error=OPENAI.http_error,
)


# -- Anthropic -----------------------------------------------------------------------------------


def _an(blocks: list[dict[str, Any]], stop: str | None, usage: tuple[int, int]) -> str:
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {
        "id": "msg_p", "content": [], "model": "claude", "usage": {"input_tokens": usage[0], "output_tokens": 1}}}]
    for index, block in enumerate(blocks):
        kind = block["type"]
        start = {"type": "tool_use", "id": block["id"], "name": "get_weather", "input": {}} if kind == "tool_use" \
            else {"type": kind, kind: ""}
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        deltas = {"thinking": lambda b: [{"type": "thinking_delta", "thinking": t} for t in b["pieces"]],
                  "text": lambda b: [{"type": "text_delta", "text": t} for t in b["pieces"]],
                  "tool_use": lambda b: [{"type": "input_json_delta", "partial_json": json.dumps(b["input"])}]}[kind]
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas(block)]
        events.append({"type": "content_block_stop", "index": index})
    if stop is None:
        events.append({"type": "error", "error": {"type": "api_error", "message": "stream broke"}})
    else:
        events += [{"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": usage[1]}},
                   {"type": "message_stop"}]
    return sse_body(*events, event_names=True)


ANTHROPIC = Wire(
    model=lambda url: AnthropicModel("claude", base_url=url, api_key="sk", retry_policy=FAST),
    tool_step=lambda: _an([{"type": "thinking", "pieces": THOUGHT},
                           *[{"type": "tool_use", "id": cid, "input": args} for cid, args in CALLS]], "tool_use", (20, 10)),
    text_step=lambda: _an([{"type": "text", "pieces": ANSWER}], "end_turn", (40, 6)),
    broken_step=lambda: _an([{"type": "text", "pieces": ["Partial"]}], None, (1, 1)),
    http_error=lambda: Reply.json({"type": "error", "error": {"type": "authentication_error",
                                                              "message": "Incorrect API key provided."}}, status=401),
)


# -- Gemini --------------------------------------------------------------------------------------


def _gm(*parts: dict[str, Any], usage: tuple[int, int] | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", "responseId": "g_p"}
    if usage:
        candidate["finishReason"] = "STOP"
        out["usageMetadata"] = {"promptTokenCount": usage[0], "candidatesTokenCount": usage[1],
                                "totalTokenCount": sum(usage)}
    return out


def _gm_stream(*chunks: dict[str, Any]) -> str:
    return "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in chunks)


GEMINI = Wire(
    model=lambda url: GeminiModel("gemini-2.5-flash", base_url=url, api_key="k", retry_policy=FAST),
    tool_step=lambda: _gm_stream(
        *[_gm({"text": t, "thought": True}) for t in THOUGHT],
        _gm(*[{"functionCall": {"id": cid, "name": "get_weather", "args": args}} for cid, args in CALLS],
            usage=(20, 10))),
    text_step=lambda: _gm_stream(_gm({"text": ANSWER[0]}), _gm({"text": ANSWER[1]}, usage=(40, 6))),
    broken_step=lambda: _gm_stream(_gm({"text": "Partial"}),
                                   {"error": {"code": 500, "message": "stream broke", "status": "INTERNAL"}}),
    http_error=lambda: Reply.json({"error": {"code": 401, "message": "Incorrect API key provided.",
                                             "status": "UNAUTHENTICATED"}}, status=401),
)

WIRES = {"openai": OPENAI, "openai-responses": RESPONSES, "anthropic": ANTHROPIC, "google": GEMINI}


# -- the scenario --------------------------------------------------------------------------------


def normalised(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parts with call ids numbered in order of appearance (each provider has its own)."""
    ids: dict[str, str] = {}
    out = []
    for part in parts:
        part = dict(part)
        if "toolCallId" in part:
            part["toolCallId"] = ids.setdefault(part["toolCallId"], f"call-{len(ids) + 1}")
        part.pop("providerMetadata", None)
        out.append(part)
    return out


async def run_turns(wire: Wire) -> dict[str, Any]:
    @tool(read_only=True)
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return {"Paris": "12C", "Rome": "20C"}[city]

    async with LoopbackServer() as server:
        server.enqueue(Reply.sse(wire.tool_step()), Reply.sse(wire.text_step()),
                       Reply.sse(wire.broken_step()), wire.http_error())
        agent = Think(model=wire.model(server.url), tools=[get_weather], store=":memory:", load_entrypoints=False)
        try:
            session = agent.session("s")
            answered = await session.chat("Weather in Paris and Rome?")
            broken = await session.chat("again")
            refused = await session.chat("once more")
            stored = await session.messages()
        finally:
            await agent.aclose()
        second = server.requests[1].json
    return {
        "answered": (answered.status, answered.text, answered.usage.model_dump(), answered.error),
        "answer_parts": normalised(answered.message.parts if answered.message else []),
        "broken": (broken.status, broken.text, "stream broke" in (broken.error or "")),
        "refused": (refused.status, "Incorrect API key provided." in (refused.error or "")),
        "stored": [(m.role, normalised(m.parts)) for m in stored],
        "requests": len(server.requests),
        "second_request": second,
    }


@pytest.mark.parametrize("provider", list(WIRES))
async def test_same_turns_from_every_provider(provider: str) -> None:
    got = await run_turns(WIRES[provider])
    usage = {"input_tokens": 60, "output_tokens": 16, "total_tokens": 76, "reasoning_tokens": 0,
             "cached_input_tokens": 0}
    assert got["answered"] == ("completed", "Paris 12C, Rome 20C.", usage, None)
    assert got["answer_parts"] == [
        {"type": "step-start"},
        {"type": "reasoning", "text": "Two cities: call both."},
        {"type": "tool-get_weather", "toolCallId": "call-1", "state": "output-available", "input": {"city": "Paris"},
         "output": "12C"},
        {"type": "tool-get_weather", "toolCallId": "call-2", "state": "output-available", "input": {"city": "Rome"},
         "output": "20C"},
        {"type": "step-start"},
        {"type": "text", "text": "Paris 12C, Rome 20C."},
    ]
    assert got["broken"] == ("error", "Partial", True)
    assert got["refused"] == ("error", True)
    assert got["requests"] == 4  # nothing retried: errors after output, and a 401
    assert [role for role, _ in got["stored"]] == ["user", "assistant", "user", "assistant", "user"]
    assert got["stored"][3][1][-1] == {"type": "text", "text": "Partial"}


async def test_every_provider_stores_the_same_conversation() -> None:
    runs = {name: await run_turns(wire) for name, wire in WIRES.items()}
    shapes = {name: (run["answered"], run["answer_parts"], run["broken"], run["refused"], run["stored"])
              for name, run in runs.items()}
    first = shapes["openai"]
    assert all(shape == first for shape in shapes.values()), shapes
    # The tool results went back paired with the calls, in each provider's own terms.
    assert [m["role"] for m in runs["openai"]["second_request"]["messages"]][-3:] == ["assistant", "tool", "tool"]
    assert [i.get("type") for i in runs["openai-responses"]["second_request"]["input"]][-2:] == [
        "function_call_output", "function_call_output"]
    assert [b["type"] for b in runs["anthropic"]["second_request"]["messages"][-1]["content"]] == [
        "tool_result", "tool_result"]
    assert [list(p) for p in runs["google"]["second_request"]["contents"][-1]["parts"]] == [
        ["functionResponse"], ["functionResponse"]]
