"""OpenAI Responses API streaming (``POST /v1/responses``), for reasoning models and o-series.

Every event names its type (``response.output_text.delta``, ...) and there is no ``[DONE]``:
the stream ends with ``response.completed``, ``response.incomplete`` or ``response.failed``.
Function calls are output items: ``response.output_item.added`` names the call (its
``call_id`` is the id the result is paired with, not the item ``id``), argument fragments follow
as ``response.function_call_arguments.delta`` keyed by item id, and ``response.output_item.done``
carries the complete call. Parallel calls are separate items. Reasoning summaries (requested with
``reasoning={"summary": "auto"}``) and raw reasoning text are reasoning deltas.

Errors inside the 200 stream come as an ``error`` event (flat ``code``/``message``, or nested
under ``error``) or as ``response.failed`` with ``response.error``; context overflow on this API
arrives that way (``context_length_exceeded``).

Requests are stateless: each step sends the whole history as ``input`` items with
``store: false``, like the other providers, so nothing is kept on OpenAI's side.
API keys and base URL as for ``openai:`` (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Unpack

from ..errors import ProviderError
from ..events import ModelEvent, ReasoningDelta, TextDelta, ToolCall, ToolInputDelta, ToolInputStart, Usage
from ._http import stream_error
from ._wire import decode_json, parse_tool_input, stop_reason_mapper, tool_output_text, wire_name
from .base import AssistantMessage, ModelRequest, ToolMessage, UserMessage, apply_provider_options
from .content import IMAGE_TYPES, FilePart, TextPart, text_or_file, tool_blocks, unsupported
from .exchange import warn_unsupported
from .http_model import NO_EVENTS, EventMapper, HTTPModelOptions, StreamingHTTPModel
from .sources import responses_annotation_source, responses_image_file
from .sse import SSEEvent

__all__ = ["OpenAIResponsesModel", "map_responses_incomplete_reason"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

map_responses_incomplete_reason = stop_reason_mapper(
    {"completed": "stop", "max_output_tokens": "length", "content_filter": "content-filter"}
)
"""``response.completed`` or ``incomplete_details.reason`` → the engine's vocabulary."""


class OpenAIResponsesModel(StreamingHTTPModel):
    """A :class:`~think_core.models.base.Model` over ``POST {base_url}/responses``.

    ``reasoning``: the request's ``reasoning`` object, e.g. ``{"effort": "low", "summary":
    "auto"}`` to stream reasoning summaries. ``store``: let OpenAI keep the responses (off: each
    step sends the whole history anyway). Other options as for
    :class:`~think_core.models.http_model.StreamingHTTPModel`; ``CallSettings.provider_options``
    are merged into the body (``include``, ``service_tier``, ``truncation``, ...).
    """

    provider = "openai"
    default_base_url = DEFAULT_BASE_URL
    base_url_env = "OPENAI_BASE_URL"
    api_key_env = "OPENAI_API_KEY"
    path = "/responses"

    def __init__(
        self,
        model_id: str,
        *,
        reasoning: dict[str, Any] | None = None,
        store: bool = False,
        **options: Unpack[HTTPModelOptions],
    ) -> None:
        super().__init__(model_id, **options)
        self.reasoning = reasoning
        self.store = store

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and plugins can inspect it)."""
        body: dict[str, Any] = {"model": self.model_id, "input": _input(request, self.provider), "stream": True, "store": self.store}
        if request.system:
            body["instructions"] = request.system
        if request.tools:
            body["tools"] = [_tool(t.name, t.description, t.parameters) for t in request.tools]
            if request.tool_choice is not None:
                body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.output is not None:
            body["text"] = {"format": {"type": "json_schema", "name": wire_name(request.output.name, 64),
                                       "schema": request.output.json_schema, "strict": False}}
        if self.reasoning:
            body["reasoning"] = dict(self.reasoning)
        s = request.settings
        warn_unsupported(self.provider, [("seed", s.seed), ("stop", s.stop)])
        for key, value in (("temperature", s.temperature), ("top_p", s.top_p), ("max_output_tokens", s.max_output_tokens)):
            if value is not None:
                body[key] = value
        # The escape hatch (reasoning_effort, thinking, top_k, safetySettings ...), deep-merged.
        return apply_provider_options(body, request.settings.provider_options, self.option_names)

    def event_mapper(self, request: ModelRequest) -> EventMapper:
        return _ResponseMapper(self.provider, self.model_id)


_Handler = Callable[["_ResponseMapper", dict[str, Any]], Sequence[ModelEvent]]


class _ResponseMapper(EventMapper):
    """Responses API events → model events, one method per event type; unknown types (content
    parts, ``*.done`` echoes of streamed text, hosted tools) map to nothing."""

    __slots__ = ("calls", "usage", "tool_calls")

    def __init__(self, provider: str, model_id: str) -> None:
        super().__init__(provider, model_id)
        self.calls: dict[str, _Call] = {}  # by item id, until the item is done
        self.usage: dict[str, Any] = {}
        self.tool_calls = 0

    def on_event(self, sse: SSEEvent) -> Sequence[ModelEvent]:
        data = decode_json(sse.data)
        if not isinstance(data, dict):
            raise TypeError("an event must be an object")
        handler = _HANDLERS.get(data.get("type") or sse.event)
        return NO_EVENTS if handler is None else handler(self, data)

    def _on_text_delta(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        delta = data.get("delta")
        return (TextDelta(delta),) if delta else NO_EVENTS

    def _on_reasoning_delta(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        delta = data.get("delta")
        return (ReasoningDelta(delta),) if delta else NO_EVENTS

    def _on_summary_part(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        # A reasoning item's summary comes in parts, each a paragraph of its own.
        return (ReasoningDelta("\n\n"),) if data.get("summary_index") else NO_EVENTS

    def _on_item_added(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        item = data.get("item") or {}
        if item.get("type") != "function_call":
            return NO_EVENTS
        call = self.calls[item["id"]] = _Call(item["call_id"], item["name"])
        arguments = item.get("arguments") or ""
        call.parts.append(arguments)
        start = ToolInputStart(call.call_id, call.name)
        return (start, ToolInputDelta(call.call_id, arguments)) if arguments else (start,)

    def _on_arguments_delta(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        call = self.calls.get(data.get("item_id") or "")
        fragment = data.get("delta")
        if call is None or not fragment:
            return NO_EVENTS
        call.parts.append(fragment)
        return (ToolInputDelta(call.call_id, fragment),)

    def _on_item_done(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        item = data.get("item") or {}
        if item.get("type") != "function_call":
            image = responses_image_file(item)  # the image generation tool's image, when it made one
            return NO_EVENTS if image is None else (image,)
        call = self.calls.pop(item["id"], None)
        events: list[ModelEvent] = []
        if call is None:  # no output_item.added seen: the whole call at once
            call = _Call(item["call_id"], item["name"])
            events.append(ToolInputStart(call.call_id, call.name))
        if isinstance(item.get("arguments"), str):
            call.parts = [item["arguments"]]  # the final arguments are authoritative
        events.append(self._close(call))
        return events

    def _on_annotation(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        source = responses_annotation_source(data.get("annotation"))
        return NO_EVENTS if source is None else (source,)

    def _close(self, call: _Call) -> ToolCall:
        self.tool_calls += 1
        raw = "".join(call.parts)
        return ToolCall(call.call_id, call.name, parse_tool_input(raw), raw)

    def _on_created(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        response = data.get("response") or {}
        self.response_id = response.get("id") or self.response_id
        self.response_model = response.get("model") or self.response_model
        return NO_EVENTS

    def _on_completed(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        response = data.get("response") or {}
        self._on_created(data)
        self.usage = response.get("usage") or {}
        details = response.get("incomplete_details") or {}
        self.stop_reason = details.get("reason") or response.get("status") or "completed"
        self.done = True
        return NO_EVENTS

    def _on_failed(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        error = (data.get("response") or {}).get("error") or {}
        raise stream_error({"error": error}, self.provider, "the response failed")

    def _on_error(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        if isinstance(data.get("error"), dict):
            raise stream_error(data, self.provider, "an error occurred during streaming")
        code = data.get("code")
        raise ProviderError(
            str(data.get("message") or "an error occurred during streaming"),
            code=code or None,
            type=code or None,
            body=data,
            provider=self.provider,
        )

    def finish(self) -> Iterator[ModelEvent]:
        for call in self.calls.values():  # cut off (e.g. by max_output_tokens) before item done
            yield self._close(call)
        reason = map_responses_incomplete_reason(self.stop_reason)
        if reason == "stop" and self.tool_calls:
            reason = "tool-calls"
        try:
            usage = _usage(self.usage)
        except (AttributeError, TypeError, ValueError):
            raise self.invalid_usage(self.usage) from None
        yield self.finish_event(reason, usage, None)


_HANDLERS: dict[str, _Handler] = {
    "response.output_text.delta": _ResponseMapper._on_text_delta,
    "response.refusal.delta": _ResponseMapper._on_text_delta,
    "response.reasoning_summary_text.delta": _ResponseMapper._on_reasoning_delta,
    "response.reasoning_text.delta": _ResponseMapper._on_reasoning_delta,
    "response.reasoning_summary_part.added": _ResponseMapper._on_summary_part,
    "response.output_item.added": _ResponseMapper._on_item_added,
    "response.function_call_arguments.delta": _ResponseMapper._on_arguments_delta,
    "response.output_item.done": _ResponseMapper._on_item_done,
    "response.output_text.annotation.added": _ResponseMapper._on_annotation,
    "response.created": _ResponseMapper._on_created,
    "response.completed": _ResponseMapper._on_completed,
    "response.incomplete": _ResponseMapper._on_completed,
    "response.failed": _ResponseMapper._on_failed,
    "error": _ResponseMapper._on_error,
}


class _Call:
    """A function call item being streamed."""

    __slots__ = ("call_id", "name", "parts")

    def __init__(self, call_id: str, name: str) -> None:
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []


def _usage(raw: dict[str, Any]) -> Usage:
    input_tokens = int(raw.get("input_tokens") or 0)
    output_tokens = int(raw.get("output_tokens") or 0)
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=int(raw.get("total_tokens") or input_tokens + output_tokens),
        reasoning_tokens=int((raw.get("output_tokens_details") or {}).get("reasoning_tokens") or 0),
        cached_input_tokens=int((raw.get("input_tokens_details") or {}).get("cached_tokens") or 0),
    )


# -- request helpers -----------------------------------------------------------------------------


def _input(request: ModelRequest, provider: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if isinstance(message, UserMessage):
            content = message.content
            items.append({"role": "user", "content": content if isinstance(content, str) else
                          [_input_part(part, provider, n) for n, part in enumerate(content)]})
        elif isinstance(message, AssistantMessage):
            if message.text:
                items.append({"role": "assistant", "content": message.text})
            for call in message.tool_calls:
                arguments = json.dumps(call.input, ensure_ascii=False)
                items.append({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments})
        elif isinstance(message, ToolMessage):
            # Like Chat Completions, no error flag on a result: the output text says it.
            tool_parts = message.parts  # a tool's files: the output as a list of input items
            output = tool_output_text(message) if tool_parts is None else tool_blocks(
                tool_parts, lambda part, n: _input_part(part, provider, n))
            items.append({"type": "function_call_output", "call_id": message.tool_call_id, "output": output})
    return items


def _input_part(part: TextPart | FilePart, provider: str, index: int) -> dict[str, Any]:
    """A text or file part as a Responses input item: ``input_image`` and (PDF) ``input_file``
    by data URL or URL, ``text/*`` files as text."""
    file = text_or_file(part, provider)
    if isinstance(file, str):  # text, or a text/* file's content
        return {"type": "input_text", "text": file}
    kind = file.kind
    if kind == "image" and file.media_type in IMAGE_TYPES:
        return {"type": "input_image", "image_url": file.data_url}
    if kind == "pdf" and file.data is None:
        return {"type": "input_file", "file_url": file.url}
    if kind == "pdf":
        return {"type": "input_file", "filename": file.filename or f"part{index}.pdf", "file_data": file.data_url}
    raise unsupported(file, provider)


def _tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    # strict is on by default on this API and needs a strict-mode schema, which ordinary
    # pydantic schemas are not: off, as on Chat Completions.
    tool: dict[str, Any] = {"type": "function", "name": name, "parameters": parameters, "strict": False}
    if description:
        tool["description"] = description
    return tool


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict):
        return {"type": "function", "name": choice.get("tool_name") or choice.get("name")}
    return choice
