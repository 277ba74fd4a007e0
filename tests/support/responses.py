"""OpenAI Responses API streams as api.openai.com sends them (named ``response.*`` events: a
message's text, function calls, reasoning summaries, the completion with its usage) and a
Responses model pointed at a loopback server."""

from __future__ import annotations

import json
from typing import Any

from tests.loopback import LoopbackServer, sse_body
from tests.support.wire import FAST
from think_core.models.openai_responses import OpenAIResponsesModel


def named(*payloads: str | dict[str, Any]) -> str:
    """The wire form: every event has an ``event:`` line naming its type."""
    return sse_body(*[json.loads(p) if isinstance(p, str) else p for p in payloads], event_names=True)


def created(model: str = "gpt-5-mini-2025-08-07") -> dict[str, Any]:
    return {"type": "response.created", "sequence_number": 0,
            "response": {"id": "resp_t", "object": "response", "status": "in_progress", "model": model, "output": [],
                         "usage": None}}


def completed(input_tokens: int, output_tokens: int, reasoning: int = 0, cached: int = 0,
              status: str = "completed", incomplete: str | None = None) -> dict[str, Any]:
    return {"type": "response.incomplete" if incomplete else "response.completed",
            "response": {"id": "resp_t", "object": "response", "status": status, "model": "gpt-5-mini-2025-08-07",
                         "incomplete_details": {"reason": incomplete} if incomplete else None,
                         "usage": {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached},
                                   "output_tokens": output_tokens,
                                   "output_tokens_details": {"reasoning_tokens": reasoning},
                                   "total_tokens": input_tokens + output_tokens}}}


def message_events(*deltas: str, index: int = 0) -> list[dict[str, Any]]:
    item_id = f"msg_{index}"
    text = "".join(deltas)
    return [
        {"type": "response.output_item.added", "output_index": index,
         "item": {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}},
        {"type": "response.content_part.added", "item_id": item_id, "output_index": index, "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": []}},
        *[{"type": "response.output_text.delta", "item_id": item_id, "output_index": index, "content_index": 0,
           "delta": d, "logprobs": []} for d in deltas],
        {"type": "response.output_text.done", "item_id": item_id, "output_index": index, "content_index": 0,
         "text": text},
        {"type": "response.content_part.done", "item_id": item_id, "output_index": index, "content_index": 0,
         "part": {"type": "output_text", "text": text, "annotations": []}},
        {"type": "response.output_item.done", "output_index": index,
         "item": {"id": item_id, "type": "message", "status": "completed", "role": "assistant",
                  "content": [{"type": "output_text", "text": text, "annotations": []}]}},
    ]


def call_events(index: int, call_id: str, name: str, arguments: str) -> list[dict[str, Any]]:
    item_id = f"fc_{index}"
    half = len(arguments) // 2
    return [
        {"type": "response.output_item.added", "output_index": index,
         "item": {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": "",
                  "status": "in_progress"}},
        *[{"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": index, "delta": d}
          for d in (arguments[:half], arguments[half:])],
        {"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": index,
         "arguments": arguments},
        {"type": "response.output_item.done", "output_index": index,
         "item": {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
                  "status": "completed"}},
    ]


def reasoning_events(*summaries: list[str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning",
                                                                           "summary": []}},
    ]
    for n, pieces in enumerate(summaries):
        events.append({"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": 0,
                       "summary_index": n, "part": {"type": "summary_text", "text": ""}})
        events += [{"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0,
                    "summary_index": n, "delta": p, "obfuscation": "XXXX"} for p in pieces]
        events.append({"type": "response.reasoning_summary_text.done", "item_id": "rs_1", "output_index": 0,
                       "summary_index": n, "text": "".join(pieces)})
    events.append({"type": "response.output_item.done", "output_index": 0,
                   "item": {"id": "rs_1", "type": "reasoning", "summary": []}})
    return events


def text_stream(*deltas: str, usage: tuple[int, int] = (12, 4)) -> str:
    return named(created(), *message_events(*deltas), completed(*usage))


def responses_model(server: LoopbackServer, **kwargs: Any) -> OpenAIResponsesModel:
    kwargs.setdefault("api_key", "sk-test")
    kwargs.setdefault("retry_policy", FAST)
    return OpenAIResponsesModel("gpt-5-mini", base_url=server.url + "/v1", **kwargs)
