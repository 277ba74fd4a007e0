"""Anthropic Messages API streaming.

Request mapping: the system prompt is top-level; an assistant
turn becomes its signed ``thinking`` (and ``redacted_thinking``) blocks as streamed, then
``text`` + ``tool_use`` blocks; tool results become ``tool_result`` blocks (paired
by ``tool_use_id``) in the next user message, consecutive results merged into one message,
because the API wants alternating roles with the results first.

Structured output: the Messages API has no ``response_format``, so a turn's ``OutputSpec`` is
sent as one extra tool whose ``input_schema`` is the output schema, and the model is made to
call it (``tool_choice`` forces it, or ``any`` when real tools are offered too). The stream
reports that tool's input **as text** (``TextDelta``), not as a ``ToolCall``: the step's text is
then the JSON document, which the engine parses like any provider's structured output. A
non-object schema is wrapped in ``{"value": ...}`` for the tool and unwrapped in the text.

Usage: ``input_tokens`` reports the whole prompt (Anthropic's uncached input plus cache reads
and writes, matching OpenAI's ``prompt_tokens``); ``cached_input_tokens`` is the cache reads.

API keys: ``api_key=None`` reads ``ANTHROPIC_API_KEY``; ``api_key=""`` sends none; a loopback
``base_url`` works keyless; otherwise a missing key is a ``ConfigurationError`` at construction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Unpack

from ..events import ModelEvent, ReasoningDelta, TextDelta, ToolCall, ToolInputDelta, ToolInputStart, Usage
from ._http import stream_error
from ._wire import TextEventShape, decode_json, parse_tool_input, stop_reason_mapper, tool_output_text, wire_name
from .base import AssistantMessage, ModelRequest, ToolMessage, UserMessage, apply_provider_options
from .content import IMAGE_TYPES, FilePart, TextPart, text_or_file, tool_blocks, unsupported
from .exchange import warn_unsupported
from .http_model import NO_EVENTS, EventMapper, HTTPModelOptions, StreamingHTTPModel
from .sources import anthropic_citation_source
from .sse import SSEEvent

__all__ = ["AnthropicModel", "map_anthropic_stop_reason"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"

map_anthropic_stop_reason = stop_reason_mapper(
    {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "model_context_window_exceeded": "length",
     "tool_use": "tool-calls", "refusal": "content-filter"}
)
"""Messages API ``stop_reason`` → the engine's vocabulary (``pause_turn``, unknown → ``other``)."""


class AnthropicModel(StreamingHTTPModel):
    """A :class:`~think_core.models.base.Model` over ``POST {base_url}/v1/messages``.

    ``max_tokens`` is required by the API; ``CallSettings.max_output_tokens`` overrides it per
    call. Other options as for :class:`~think_core.models.http_model.StreamingHTTPModel`.
    """

    provider = "anthropic"
    default_base_url = DEFAULT_BASE_URL
    base_url_env = "ANTHROPIC_BASE_URL"
    api_key_env = "ANTHROPIC_API_KEY"
    path = "/v1/messages"

    def __init__(
        self,
        model_id: str,
        *,
        max_tokens: int = 4096,
        anthropic_version: str = ANTHROPIC_VERSION,
        **options: Unpack[HTTPModelOptions],
    ) -> None:
        super().__init__(model_id, **options)
        self.max_tokens = max_tokens
        self._version = anthropic_version

    def default_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self._version}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and plugins can inspect it)."""
        s = request.settings
        body: dict[str, Any] = {
            "model": self.model_id,
            "max_tokens": s.max_output_tokens or self.max_tokens,
            "messages": _messages(request, self.provider),
            "stream": True,
        }
        if request.system:
            body["system"] = request.system
        tools = [_tool(t.name, t.description, t.parameters) for t in request.tools]
        choice = _tool_choice(request.tool_choice) if tools and request.tool_choice is not None else None
        output = _OutputTool.for_request(request)
        if output is not None:
            choice = _choice_with_output(request, output, choice, bool(tools))
            tools.append(_tool(output.name, output.description, output.schema))
        if tools:
            body["tools"] = tools
            if choice is not None:
                body["tool_choice"] = choice
        warn_unsupported(self.provider, [("seed", s.seed)])
        for key, value in (("temperature", s.temperature), ("top_p", s.top_p), ("stop_sequences", s.stop)):
            if value is not None:
                body[key] = value
        # The escape hatch (reasoning_effort, thinking, top_k, safetySettings ...), deep-merged.
        return apply_provider_options(body, request.settings.provider_options, self.option_names)

    def event_mapper(self, request: ModelRequest) -> EventMapper:
        return _MessageMapper(self.provider, self.model_id, _OutputTool.for_request(request))


def _choice_with_output(
    request: ModelRequest, output: _OutputTool, choice: dict[str, Any] | None, has_tools: bool
) -> dict[str, Any] | None:
    """The ``tool_choice`` once the output tool is offered: the model must call some tool."""
    if isinstance(request.tool_choice, dict) and choice is not None:
        return choice  # an explicit choice of a real tool wins
    if has_tools and request.tool_choice != "none":
        return {"type": "any"}  # a real tool or the answer, but some tool
    return {"type": "tool", "name": output.name}


_Handler = Callable[["_MessageMapper", dict[str, Any]], Sequence[ModelEvent]]


class _MessageMapper(EventMapper):
    """Messages API events → model events, one method per event type; ``message_stop`` ends the
    stream, ``ping`` and unknown types are ignored."""

    __slots__ = ("output", "blocks", "usage", "tool_calls")

    def __init__(self, provider: str, model_id: str, output: _OutputTool | None) -> None:
        super().__init__(provider, model_id)
        self.output = output
        self.blocks: dict[int, _Block] = {}
        self.usage: dict[str, Any] = {}
        self.tool_calls = 0
        self.text_shape: TextEventShape = TextEventShape()

    def on_event(self, sse: SSEEvent) -> Sequence[ModelEvent]:
        text = self.text_shape.match(sse.data)
        if text is not None:
            return (TextDelta(text),)
        data = decode_json(sse.data)
        if not isinstance(data, dict):
            raise TypeError("an event must be an object")
        handler = _HANDLERS.get(data.get("type") or sse.event)
        events = NO_EVENTS if handler is None else handler(self, data)
        if handler is _MessageMapper._on_content_block_delta and len(events) == 1 and type(events[0]) is TextDelta:
            delta = data["delta"]
            if delta.get("type") == "text_delta" and len(data) == 3 and len(delta) == 2:
                self.text_shape.learn(sse.event, sse.data, "text", events[0].text)
        return events

    def _on_content_block_delta(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        delta = data.get("delta") or {}
        dtype = delta.get("type")
        if dtype == "text_delta":
            text = delta.get("text")
            return (TextDelta(text),) if text else NO_EVENTS
        if dtype == "input_json_delta":
            return self._on_input_json(data.get("index", -1), delta.get("partial_json") or "")
        if dtype == "thinking_delta":
            thinking = delta.get("thinking")
            return (ReasoningDelta(thinking),) if thinking else NO_EVENTS
        if dtype == "signature_delta" and delta.get("signature"):
            # The thinking block's signature: sent back with the block, or Anthropic refuses it.
            return (ReasoningDelta("", {"anthropic": {"signature": delta["signature"]}}),)
        if dtype == "citations_delta":
            source = anthropic_citation_source(delta.get("citation"))
            return NO_EVENTS if source is None else (source,)
        return NO_EVENTS

    def _on_input_json(self, index: int, fragment: str) -> Sequence[ModelEvent]:
        block = self.blocks.get(index)
        if block is None or not fragment:
            return NO_EVENTS
        block.parts.append(fragment)
        if not block.is_output:
            return (ToolInputDelta(block.id, fragment),)
        # The output tool's input is the answer: streamed as text unless it must be unwrapped.
        return NO_EVENTS if self.output and self.output.wrapped else (TextDelta(fragment),)

    def _on_content_block_start(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        cb = data.get("content_block") or {}
        ctype = cb.get("type")
        if ctype == "text" and cb.get("text"):
            return (TextDelta(cb["text"]),)
        if ctype == "thinking" and (cb.get("thinking") or cb.get("signature")):
            signature = cb.get("signature")
            return (ReasoningDelta(cb.get("thinking") or "", {"anthropic": {"signature": signature}} if signature else None),)
        if ctype == "redacted_thinking" and cb.get("data"):
            return (ReasoningDelta("", {"anthropic": {"redactedData": cb["data"]}}),)
        if ctype != "tool_use":
            return NO_EVENTS
        name = cb.get("name") or ""
        block = _Block(cb.get("id") or "", name, self.output is not None and cb.get("name") == self.output.name)
        self.blocks[data.get("index", len(self.blocks))] = block
        return NO_EVENTS if block.is_output else (ToolInputStart(block.id, block.name),)

    def _on_content_block_stop(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        block = self.blocks.pop(data.get("index", -1), None)
        return NO_EVENTS if block is None else self._close(block)

    def _close(self, block: _Block) -> list[ModelEvent]:
        self.tool_calls += not block.is_output
        return block.finish(self.output)

    def _on_message_start(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        message = data.get("message") or {}
        self.response_id = message.get("id")
        self.response_model = message.get("model")
        self._add_usage(message.get("usage"))
        return NO_EVENTS

    def _on_message_delta(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        self.stop_reason = (data.get("delta") or {}).get("stop_reason") or self.stop_reason
        self._add_usage(data.get("usage"))
        return NO_EVENTS

    def _add_usage(self, usage: dict[str, Any] | None) -> None:
        self.usage.update({k: v for k, v in (usage or {}).items() if v is not None})

    def _on_message_stop(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        self.done = True
        return NO_EVENTS

    def _on_error(self, data: dict[str, Any]) -> Sequence[ModelEvent]:
        raise stream_error(data, self.provider, "an error occurred during streaming")

    def finish(self) -> Iterator[ModelEvent]:
        for block in self.blocks.values():  # cut off (e.g. by max_tokens) before content_block_stop
            yield from self._close(block)
        reason = map_anthropic_stop_reason(self.stop_reason)
        if reason == "tool-calls" and not self.tool_calls:
            reason = "stop"  # only the structured-output tool was called: that is the answer
        try:
            usage, cache_write = _usage(self.usage)
        except (TypeError, ValueError):
            raise self.invalid_usage(self.usage) from None
        metadata = {"anthropic": {"cache_creation_input_tokens": cache_write}} if cache_write else None
        yield self.finish_event(reason, usage, metadata)


_HANDLERS: dict[str, _Handler] = {
    "content_block_delta": _MessageMapper._on_content_block_delta,
    "content_block_start": _MessageMapper._on_content_block_start,
    "content_block_stop": _MessageMapper._on_content_block_stop,
    "message_start": _MessageMapper._on_message_start,
    "message_delta": _MessageMapper._on_message_delta,
    "message_stop": _MessageMapper._on_message_stop,
    "error": _MessageMapper._on_error,
}


def _usage(raw: dict[str, Any]) -> tuple[Usage, int]:
    """The whole prompt as input (uncached + cache writes + cache reads), and the cache writes."""
    cache_write = int(raw.get("cache_creation_input_tokens") or 0)
    cache_read = int(raw.get("cache_read_input_tokens") or 0)
    input_tokens = int(raw.get("input_tokens") or 0) + cache_write + cache_read
    output_tokens = int(raw.get("output_tokens") or 0)
    usage = Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
        cached_input_tokens=cache_read,
    )
    return usage, cache_write


class _Block:
    """A ``tool_use`` content block being streamed."""

    __slots__ = ("id", "name", "is_output", "parts")

    def __init__(self, id: str, name: str, is_output: bool) -> None:
        self.id = id
        self.name = name
        self.is_output = is_output
        self.parts: list[str] = []

    def finish(self, output: _OutputTool | None) -> list[ModelEvent]:
        raw = "".join(self.parts)
        if not self.is_output:
            return [ToolCall(self.id, self.name, parse_tool_input(raw), raw)]
        if output is not None and output.wrapped:
            try:
                return [TextDelta(json.dumps(json.loads(raw or "{}").get("value"), ensure_ascii=False))]
            except (ValueError, AttributeError):
                return [TextDelta(raw)]  # invalid JSON: let the engine's parser report it
        return []


class _OutputTool:
    """The tool that carries a turn's structured output."""

    __slots__ = ("name", "schema", "wrapped", "description")

    def __init__(self, name: str, schema: dict[str, Any], wrapped: bool) -> None:
        self.name = name
        self.schema = schema
        self.wrapped = wrapped
        self.description = "Give your final answer by calling this tool; its input is the answer."

    @classmethod
    def for_request(cls, request: ModelRequest) -> _OutputTool | None:
        """The output tool of ``request``, named apart from its real tools; ``None`` without output."""
        if request.output is None:
            return None
        return cls.for_spec(request.output.name, request.output.json_schema, {t.name for t in request.tools})

    @classmethod
    def for_spec(cls, name: str, schema: dict[str, Any], taken: set[str]) -> _OutputTool:
        unique = wire_name(name, 60)
        while unique in taken:
            unique = f"{unique}_"
        if schema.get("type") == "object":
            return cls(unique, schema, False)
        return cls(unique, {"type": "object", "properties": {"value": schema}, "required": ["value"]}, True)


# -- request helpers -----------------------------------------------------------------------------


def _messages(request: ModelRequest, provider: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def push(role: str, content: str | list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:  # merge: the API wants alternating roles
            previous = out[-1]["content"]
            if isinstance(previous, str):
                previous = [{"type": "text", "text": previous}]
            extra = [{"type": "text", "text": content}] if isinstance(content, str) else content
            out[-1]["content"] = previous + extra
        else:
            out.append({"role": role, "content": content})

    for message in request.messages:
        if isinstance(message, UserMessage):
            content = message.content
            push("user", content if isinstance(content, str) else [_content_block(p, provider) for p in content])
        elif isinstance(message, AssistantMessage):
            blocks: list[dict[str, Any]] = _thinking_blocks(message)
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            for call in message.tool_calls:
                blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input})
            if blocks:  # the API rejects empty content
                push("assistant", blocks)
        elif isinstance(message, ToolMessage):
            tool_parts = message.parts  # a tool's files go inside its result, as image/document blocks
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": tool_output_text(message) if tool_parts is None else
                tool_blocks(tool_parts, lambda part, _: _content_block(part, provider)),
            }
            if message.is_error:
                result["is_error"] = True
            push("user", [result])
    return out


def _content_block(part: TextPart | FilePart, provider: str) -> dict[str, Any]:
    """A text or file part as a Messages API block: ``image`` and (PDF) ``document`` blocks with a
    base64 or URL source, ``text/*`` files as text."""
    file = text_or_file(part, provider)
    if isinstance(file, str):  # text, or a text/* file's content
        return {"type": "text", "text": file}
    kind = file.kind
    if kind == "image" and file.media_type in IMAGE_TYPES:
        return {"type": "image", "source": _source(file)}
    if kind == "pdf":
        block: dict[str, Any] = {"type": "document", "source": _source(file)}
        if file.filename:
            block["title"] = file.filename
        return block
    raise unsupported(file, provider)


def _source(part: FilePart) -> dict[str, Any]:
    if part.data is None:
        return {"type": "url", "url": part.url}
    return {"type": "base64", "media_type": part.media_type, "data": part.data}


def _thinking_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    """The step's thinking as Anthropic streamed it, signed: with thinking enabled, a tool-use
    step must come back with its thinking blocks. Reasoning without Anthropic's signature (from
    another provider) cannot be sent as thinking and is left out."""
    blocks: list[dict[str, Any]] = []
    for block in message.reasoning_blocks:
        metadata = (block.provider_metadata or {}).get("anthropic") or {}
        if metadata.get("signature"):
            blocks.append({"type": "thinking", "thinking": block.text, "signature": metadata["signature"]})
        elif metadata.get("redactedData"):
            blocks.append({"type": "redacted_thinking", "data": metadata["redactedData"]})
    return blocks


def _tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "input_schema": parameters}
    if description:
        tool["description"] = description
    return tool


def _tool_choice(choice: Any) -> dict[str, Any]:
    if isinstance(choice, dict):
        return {"type": "tool", "name": choice.get("tool_name") or choice.get("name")}
    return {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}.get(choice, {"type": "auto"})
