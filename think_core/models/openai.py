"""OpenAI Chat Completions streaming, for OpenAI and every OpenAI-compatible server.

The Chat Completions wire format is the lingua franca of model servers (Ollama, vLLM,
llama.cpp, Groq, OpenRouter, DeepSeek, Azure), so this one class covers all of them through
``base_url``. It is written against the quirks seen in the wild: tool-call deltas without
``index``, ``choices: []`` chunks, usage on the finish chunk, reasoning text in
``reasoning_content`` or ``reasoning``, error objects inside a 200 stream.

API keys: ``api_key=None`` reads ``OPENAI_API_KEY``; ``api_key=""`` sends no key. With no key,
a loopback ``base_url`` (a local server) works keyless and anything else raises
``ConfigurationError`` at construction, before any request.

Azure: ``OpenAIChatModel(deployment, base_url="https://R.openai.azure.com/openai/deployments/D",
api_key="", headers={"api-key": KEY}, query={"api-version": "2024-10-21"})``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Unpack

from ..events import ModelEvent, ReasoningDelta, TextDelta, ToolCall, ToolInputDelta, ToolInputStart, Usage
from ._http import stream_error
from ._wire import TextEventShape, decode_json, parse_tool_input, stop_reason_mapper, tool_output_text, wire_name
from .base import AssistantMessage, ModelRequest, ToolMessage, UserMessage, apply_provider_options
from .content import IMAGE_TYPES, FilePart, TextPart, text_or_file, tool_blocks, unsupported
from .http_model import NO_EVENTS, EventMapper, HTTPModelOptions, StreamingHTTPModel
from .sources import chat_annotation_sources
from .sse import SSEEvent

__all__ = ["OpenAIChatModel", "map_openai_finish_reason", "tool_output_text"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

map_openai_finish_reason = stop_reason_mapper(
    {"stop": "stop", "length": "length", "tool_calls": "tool-calls", "function_call": "tool-calls",
     "content_filter": "content-filter"}
)
"""Chat Completions ``finish_reason`` → the engine's vocabulary (unknown → ``other``)."""


class OpenAIChatModel(StreamingHTTPModel):
    """A :class:`~think_core.models.base.Model` over ``POST {base_url}/chat/completions``.

    Options as for :class:`~think_core.models.http_model.StreamingHTTPModel` (``provider`` names
    an OpenAI-compatible server in errors and events).
    ``max_tokens_param``: the body field for ``max_output_tokens``; by default
    ``max_completion_tokens`` for api.openai.com (reasoning models require it) and the widely
    supported ``max_tokens`` for other servers.
    """

    provider = "openai"
    default_base_url = DEFAULT_BASE_URL
    base_url_env = "OPENAI_BASE_URL"
    api_key_env = "OPENAI_API_KEY"
    path = "/chat/completions"

    def __init__(self, model_id: str, *, max_tokens_param: str | None = None, **options: Unpack[HTTPModelOptions]) -> None:
        super().__init__(model_id, **options)
        self._max_tokens_param = max_tokens_param or (
            "max_completion_tokens" if "api.openai.com" in self.base_url else "max_tokens"
        )

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and plugins can inspect it)."""
        body: dict[str, Any] = {
            "model": self.model_id,
            "messages": _messages(request, self.provider),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [_tool(t.name, t.description, t.parameters) for t in request.tools]
            if request.tool_choice is not None:
                body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.output is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": wire_name(request.output.name, 64), "schema": request.output.json_schema},
            }
        s = request.settings
        for key, value in (
            ("temperature", s.temperature),
            ("top_p", s.top_p),
            (self._max_tokens_param, s.max_output_tokens),
            ("stop", s.stop),
            ("seed", s.seed),
        ):
            if value is not None:
                body[key] = value
        # The escape hatch (reasoning_effort, thinking, top_k, safetySettings ...), deep-merged.
        return apply_provider_options(body, request.settings.provider_options, self.option_names)

    def event_mapper(self, request: ModelRequest) -> EventMapper:
        return _ChunkMapper(self.provider, self.model_id)




class _ChunkMapper(EventMapper):
    """Chat Completions chunks → model events. ``[DONE]`` ends the stream; the finish reason and
    the usage may come on separate chunks (usage last, with ``choices: []``)."""

    __slots__ = ("calls", "usage", "fingerprint")

    def __init__(self, provider: str, model_id: str) -> None:
        super().__init__(provider, model_id)
        self.calls = _ToolCalls()
        self.usage: dict[str, Any] | None = None
        self.fingerprint: str | None = None
        self.text_shape: TextEventShape = TextEventShape()

    def on_event(self, sse: SSEEvent) -> Sequence[ModelEvent]:
        data = sse.data
        text = self.text_shape.match(data)
        if text is not None:
            return (TextDelta(text),)
        if data.startswith("[DONE]"):
            self.done = True
            return NO_EVENTS
        chunk = decode_json(data)
        if not isinstance(chunk, dict):
            return NO_EVENTS
        if chunk.get("error"):
            raise stream_error(chunk, self.provider, "an error occurred during streaming")
        if self.response_id is None:
            self.response_id = chunk.get("id") or None
            self.response_model = chunk.get("model") or None
            self.fingerprint = chunk.get("system_fingerprint")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or NO_EVENTS
        if not isinstance(choices, (list, tuple)):
            raise TypeError("choices must be a list")
        if len(choices) == 1:
            mapped = self._on_choice(choices[0])
            if len(mapped) == 1 and type(mapped[0]) is TextDelta and self._plain_text(chunk):
                # OpenAI pads every chunk with a random "obfuscation" string: skipped, never read.
                padding = ("obfuscation", chunk["obfuscation"]) if "obfuscation" in chunk else None
                self.text_shape.learn(sse.event, data, "content", mapped[0].text, padding)
            return mapped
        events: list[ModelEvent] = []
        for choice in choices:
            events += self._on_choice(choice)
        return events

    @staticmethod
    def _plain_text(chunk: dict[str, Any]) -> bool:
        """The chunk carried its delta's text and nothing else that changes the stream's state."""
        choice = chunk["choices"][0]
        return not chunk.get("usage") and not choice.get("finish_reason") and len(choice["delta"]) == 1

    def _on_choice(self, choice: Any) -> Sequence[ModelEvent]:
        if not isinstance(choice, dict):
            raise TypeError("a choice must be an object")
        if choice.get("finish_reason"):
            self.stop_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if content and len(delta) == 1:
                return (TextDelta(content),)  # the common chunk: nothing but text
            return self._on_delta(delta)
        if delta is not None:
            raise TypeError("a delta must be an object")
        return NO_EVENTS

    def _on_delta(self, delta: dict[str, Any]) -> Sequence[ModelEvent]:
        content = delta.get("content")
        events: list[ModelEvent] = [TextDelta(content)] if content else []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and isinstance(reasoning, str):
            events.append(ReasoningDelta(reasoning))
        refusal = delta.get("refusal")
        if refusal:
            events.append(TextDelta(refusal))
        tool_deltas = delta.get("tool_calls")
        if tool_deltas:
            events += self.calls.add(tool_deltas)
        if delta.get("annotations"):  # a search model's citations
            events += chat_annotation_sources(delta["annotations"])
        return events

    def finish(self) -> Iterator[ModelEvent]:
        yield from self.calls.complete()
        if self.stop_reason:
            reason = map_openai_finish_reason(self.stop_reason)
        else:
            reason = "stop" if self.done else "other"
        if self.calls and reason == "stop":
            reason = "tool-calls"  # some compatible servers report "stop" after tool calls
        try:
            usage = _usage(self.usage)
        except (AttributeError, TypeError, ValueError):
            raise self.invalid_usage(self.usage) from None
        fingerprint = self.fingerprint
        yield self.finish_event(reason, usage, {"openai": {"system_fingerprint": fingerprint}} if fingerprint else None)


class _ToolCalls:
    """Assembles streamed tool-call fragments, keyed by ``index`` (by id or position when a
    server omits it), and emits start/delta events as soon as the call's name is known."""

    __slots__ = ("_slots", "_order")

    def __init__(self) -> None:
        self._slots: dict[int, _Slot] = {}
        self._order: list[_Slot] = []

    def __bool__(self) -> bool:
        return bool(self._order)

    def add(self, deltas: list[dict[str, Any]]) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        if not isinstance(deltas, list):
            raise TypeError("tool_calls must be a list")
        for tc in deltas:
            if not isinstance(tc, dict):
                raise TypeError("a tool-call delta must be an object")
            slot = self._slot_for(tc)
            function = tc.get("function") or {}
            if not slot.id and tc.get("id"):
                slot.id = tc["id"]
            if not slot.name and function.get("name"):
                slot.name = function["name"]
            fragment = function.get("arguments")
            if fragment is not None and not isinstance(fragment, str):
                fragment = json.dumps(fragment)  # a few servers send the arguments as an object
            if fragment:
                slot.parts.append(fragment)
            if not slot.started and slot.name:
                slot.started = True
                slot.id = slot.id or f"call_{uuid.uuid4().hex[:24]}"
                events.append(ToolInputStart(slot.id, slot.name))
                if slot.parts:
                    events.append(ToolInputDelta(slot.id, "".join(slot.parts)))
            elif slot.started and fragment:
                events.append(ToolInputDelta(slot.id, fragment))
        return events

    def _slot_for(self, tc: dict[str, Any]) -> _Slot:
        index = tc.get("index")
        if index is None:
            call_id = tc.get("id")
            known = next((s for s in self._order if call_id and s.id == call_id), None)
            if known is not None:
                return known
            if call_id or not self._order:
                index = len(self._order)
                while index in self._slots:
                    index += 1
            else:
                return self._order[-1]  # a continuation fragment of the latest call
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = _Slot()
            self._order.append(slot)
        return slot

    def complete(self) -> list[ToolCall]:
        out: list[ToolCall] = []
        for index in sorted(self._slots):
            slot = self._slots[index]
            if not slot.name:
                continue  # fragments that never named a tool cannot be called
            raw = "".join(slot.parts)
            out.append(ToolCall(slot.id, slot.name, parse_tool_input(raw), raw))
        return out


class _Slot:
    __slots__ = ("id", "name", "parts", "started")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.parts: list[str] = []
        self.started = False


def _usage(raw: dict[str, Any] | None) -> Usage:
    if not raw:
        return Usage()
    prompt = int(raw.get("prompt_tokens") or 0)
    completion = int(raw.get("completion_tokens") or 0)
    prompt_details = raw.get("prompt_tokens_details") or {}
    completion_details = raw.get("completion_tokens_details") or {}
    cached = prompt_details.get("cached_tokens") or raw.get("prompt_cache_hit_tokens") or 0  # DeepSeek
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=int(raw.get("total_tokens") or prompt + completion),
        reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0),
        cached_input_tokens=int(cached),
    )


# -- request helpers -----------------------------------------------------------------------------


def _messages(request: ModelRequest, provider: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    files: list[dict[str, Any]] = []  # the latest results' files: a user message after the results
    for message in request.messages:
        if files and not isinstance(message, ToolMessage):
            messages.append({"role": "user", "content": files})
            files = []
        if isinstance(message, UserMessage):
            content = message.content
            messages.append({"role": "user", "content": content if isinstance(content, str) else
                             [_content_block(part, provider, n) for n, part in enumerate(content)]})
        elif isinstance(message, AssistantMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.input, ensure_ascii=False)},
                    }
                    for call in message.tool_calls
                ]
            elif entry["content"] is None:
                entry["content"] = ""
            messages.append(entry)
        elif isinstance(message, ToolMessage):
            # Chat Completions has no error flag on tool results: the output text says it.
            messages.append({"role": "tool", "tool_call_id": message.tool_call_id,
                             "content": _tool_content(message, provider, files)})
    if files:
        messages.append({"role": "user", "content": files})
    return messages


def _tool_content(message: ToolMessage, provider: str, files: list[dict[str, Any]]) -> str:
    """A tool message's text. A tool message takes only text, so the files a tool returned go
    to ``files``, for a user message after the step's results, and the text says so."""
    tool_parts = message.parts
    if tool_parts is None:
        return tool_output_text(message)
    text: list[str] = []
    attached: list[dict[str, Any]] = []
    for block in tool_blocks(tool_parts, lambda part, n: _content_block(part, provider, n)):
        if block["type"] == "text":
            text.append(block["text"])
        else:
            attached.append(block)
    if attached:
        files.append({"type": "text", "text": f"The files tool call {message.tool_call_id} ({message.tool_name}) returned:"})
        files += attached
        text.append(f"[{len(attached)} file(s), in the next user message]")
    return "\n".join(text)


_AUDIO_FORMATS = {"audio/wav": "wav", "audio/mpeg": "mp3"}


def _content_block(part: TextPart | FilePart, provider: str, index: int) -> dict[str, Any]:
    """A text or file part as a Chat Completions content block: images by URL or data URL, PDFs
    and WAV/MP3 audio as their bytes, ``text/*`` files as text."""
    file = text_or_file(part, provider)
    if isinstance(file, str):  # text, or a text/* file's content
        return {"type": "text", "text": file}
    kind = file.kind
    if kind == "image" and file.media_type in IMAGE_TYPES:
        return {"type": "image_url", "image_url": {"url": file.data_url}}
    if kind in ("pdf", "audio") and file.data is None:
        raise unsupported(file, provider, "by URL (send its bytes as a data URL)")
    if kind == "pdf":
        return {"type": "file", "file": {"filename": file.filename or f"part{index}.pdf", "file_data": file.data_url}}
    audio_format = _AUDIO_FORMATS.get(file.media_type)
    if audio_format is not None:
        return {"type": "input_audio", "input_audio": {"data": file.data, "format": audio_format}}
    raise unsupported(file, provider)


def _tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name, "parameters": parameters}
    if description:
        function["description"] = description
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict):
        name = choice.get("tool_name") or choice.get("name")
        return {"type": "function", "function": {"name": name}}
    return choice
