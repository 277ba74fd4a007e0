"""Provider streams as the providers send them, and models pointed at a loopback server.

OpenAI Chat Completions chunks (``oa_*``: ``data:`` events ending in ``[DONE]``), Anthropic
Messages events (``an_stream``: named events from ``message_start`` to ``message_stop``), the
retry policy that keeps retry tests fast, and a request with a collector of its stream events.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

from tests.loopback import LoopbackServer, sse_body
from think_core.events import TextDelta
from think_core.models.anthropic import AnthropicModel
from think_core.models.base import ModelRequest, UserMessage
from think_core.models.openai import OpenAIChatModel
from think_core.models.retry import RetryPolicy

FAST = RetryPolicy(max_retries=2, initial_delay=0.01, max_delay=0.02)


def openai_model(server: LoopbackServer) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o", base_url=server.url + "/v1", api_key="sk-test", retry_policy=FAST)


def anthropic_model(server: LoopbackServer) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-5", base_url=server.url, api_key="sk-ant", retry_policy=FAST)


def oa_chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-t", "object": "chat.completion.chunk", "model": "gpt-4o", "choices": choices, **extra}


def oa_usage(prompt: int, completion: int) -> dict[str, Any]:
    return oa_chunk(None, usage={"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion})


def oa_events(*pieces: str) -> list[Any]:
    """The opening of a stream: the role chunk, then one content chunk per piece (no end)."""
    return [oa_chunk({"role": "assistant", "content": ""})] + [oa_chunk({"content": p}) for p in pieces]


def oa_text(*pieces: str, usage: tuple[int, int] = (10, 5)) -> str:
    return sse_body(*[oa_chunk({"content": p}) for p in pieces], oa_chunk({}, "stop"), oa_usage(*usage), done=True)


def oa_tool_call(call_id: str, name: str, arguments: str, usage: tuple[int, int] = (20, 8)) -> str:
    half = len(arguments) // 2
    return sse_body(
        oa_chunk({"role": "assistant", "content": None}),
        oa_chunk({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                  "function": {"name": name, "arguments": ""}}]}),
        oa_chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]}),
        oa_chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}),
        oa_chunk({}, "tool_calls"),
        oa_usage(*usage),
        done=True,
    )


def an_stream(*blocks: dict[str, Any], stop: str, input_tokens: int, output_tokens: int) -> str:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_t", "type": "message", "role": "assistant", "content": [],
                                              "model": "claude-sonnet-4-5",
                                              "usage": {"input_tokens": input_tokens, "output_tokens": 1}}},
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events += [
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": block["text"]}},
            ]
        else:
            events += [
                {"type": "content_block_start", "index": index,
                 "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}},
                {"type": "content_block_delta", "index": index,
                 "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}},
            ]
        events.append({"type": "content_block_stop", "index": index})
    events += [
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": output_tokens}},
        {"type": "message_stop"},
    ]
    return sse_body(*events, event_names=True)


def ask(text: str = "hi", **kwargs: Any) -> ModelRequest:
    """A request with one user message."""
    return ModelRequest(messages=[UserMessage(content=text)], **kwargs)


async def collect(model: Any, request: ModelRequest, seen: list[Any] | None = None) -> list[Any]:
    """Every event of ``model.stream(request)``, appended to ``seen`` as they arrive when given
    (so a test sees what came before a raise)."""
    events = seen if seen is not None else []
    async with aclosing(model.stream(request)) as stream:
        async for event in stream:
            events.append(event)
    return events


def text_of(events: list[Any]) -> str:
    """The text the stream's ``TextDelta`` events spell."""
    return "".join(e.text for e in events if isinstance(e, TextDelta))
