"""Google Gemini ``streamGenerateContent`` streaming (the Gemini Developer API, ``?alt=sse``).

Each event is a whole ``GenerateContentResponse`` chunk and there is no end marker: the stream
ends after the chunk that carries ``finishReason`` (or a ``promptFeedback.blockReason`` when the
prompt itself was blocked). Function calls arrive whole, their ``args`` an object, so each is
reported as start, one input delta and the complete call at once; parallel calls are parts of
one chunk. Thought parts (``"thought": true``, sent when ``thinkingConfig.includeThoughts`` is
on) are reasoning. ``usageMetadata`` is cumulative, so the last one counts; thinking tokens are
part of the output, as OpenAI counts reasoning tokens in ``completion_tokens``.

Request mapping: the system prompt is ``systemInstruction``; tool schemas go in
``parametersJsonSchema`` and structured output in ``responseJsonSchema`` (full JSON Schema, no
conversion to Google's OpenAPI subset); tool results become ``functionResponse`` parts, the
results of one step in one content, the output under ``output`` (``error`` for a failed tool).
A function call's ``thoughtSignature`` is kept with the call in the history (its
``provider_metadata``) and sent back with it, as Gemini 3 requires; a call without one (made
by another provider, or stored before signatures were kept) carries Google's documented
validator-skipping signature instead.

API keys: ``api_key=None`` reads ``GEMINI_API_KEY``, then ``GOOGLE_API_KEY``; ``api_key=""``
sends none; a loopback ``base_url`` works keyless; otherwise a missing key is a
``ConfigurationError`` at construction. ``GOOGLE_BASE_URL`` overrides the endpoint.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Unpack

from ..errors import ProviderError
from ..events import ModelEvent, ReasoningDelta, TextDelta, ToolCall, ToolInputDelta, ToolInputStart, Usage
from ._wire import decode_json, stop_reason_mapper, tool_output_text
from .base import AssistantMessage, ModelRequest, ToolMessage, UserMessage, apply_provider_options
from .content import FilePart, TextPart, text_or_file, tool_blocks, unsupported
from .http_model import NO_EVENTS, EventMapper, HTTPModelOptions, StreamingHTTPModel
from .sources import gemini_grounding_sources, gemini_inline_file
from .sse import SSEEvent

__all__ = ["GeminiModel", "map_gemini_finish_reason"]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"

map_gemini_finish_reason = stop_reason_mapper(
    {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content-filter", "RECITATION": "content-filter",
     "BLOCKLIST": "content-filter", "PROHIBITED_CONTENT": "content-filter", "SPII": "content-filter",
     "IMAGE_SAFETY": "content-filter", "LANGUAGE": "content-filter"}
)
"""Gemini ``finishReason`` (and prompt ``blockReason``) → the engine's vocabulary
(``MALFORMED_FUNCTION_CALL``, ``OTHER``, unknown → ``other``)."""

_SKIP_SIGNATURE = "skip_thought_signature_validator"
_GEMINI_VERSION = re.compile(r"^gemini-(\d+)")
_TOOL_CHOICE = {"auto": {"mode": "AUTO"}, "required": {"mode": "ANY"}, "none": {"mode": "NONE"}}


class GeminiModel(StreamingHTTPModel):
    """A :class:`~think_core.models.base.Model` over
    ``POST {base_url}/models/{model}:streamGenerateContent?alt=sse``.

    ``thinking``: the ``generationConfig.thinkingConfig`` to send, e.g.
    ``{"includeThoughts": True, "thinkingBudget": 1024}`` to stream thought summaries as
    reasoning. Other options as for :class:`~think_core.models.http_model.StreamingHTTPModel`;
    ``CallSettings.provider_options`` are deep-merged into the body (so
    ``{"generationConfig": {"topK": 5}}`` adds to the generation config), under ``"google"`` or
    ``"gemini"`` when keyed by provider.
    """

    provider = "google"
    provider_aliases = ("gemini",)
    default_base_url = DEFAULT_BASE_URL
    base_url_env = "GOOGLE_BASE_URL"
    api_key_env = "GEMINI_API_KEY"

    def __init__(
        self, model_id: str, *, thinking: dict[str, Any] | None = None, **options: Unpack[HTTPModelOptions]
    ) -> None:
        if options.get("api_key") is None and not os.environ.get(self.api_key_env):
            options["api_key"] = os.environ.get("GOOGLE_API_KEY") or None
        super().__init__(model_id.removeprefix("models/"), **options)
        self.thinking = thinking
        version = _GEMINI_VERSION.match(self.model_id)
        self._requires_signatures = version is not None and int(version[1]) >= 3

    def endpoint(self, request: ModelRequest) -> str:
        return f"{self.base_url}/models/{self.model_id}:streamGenerateContent?alt=sse"

    def default_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._api_key} if self._api_key else {}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and plugins can inspect it)."""
        body: dict[str, Any] = {"contents": _contents(request, self._requires_signatures, self.provider)}
        if request.system:
            body["systemInstruction"] = {"parts": [{"text": request.system}]}
        if request.tools:
            body["tools"] = [{"functionDeclarations": [_function(t.name, t.description, t.parameters)
                                                       for t in request.tools]}]
            if request.tool_choice is not None:
                body["toolConfig"] = {"functionCallingConfig": _tool_choice(request.tool_choice)}
        config = _generation_config(request)
        if self.thinking:
            config["thinkingConfig"] = dict(self.thinking)
        if config:
            body["generationConfig"] = config
        # The escape hatch (reasoning_effort, thinking, top_k, safetySettings ...), deep-merged.
        return apply_provider_options(body, request.settings.provider_options, self.option_names)

    def event_mapper(self, request: ModelRequest) -> EventMapper:
        return _ChunkMapper(self.provider, self.model_id)


class _ChunkMapper(EventMapper):
    """``GenerateContentResponse`` chunks → model events; the first candidate is the answer."""

    __slots__ = ("usage", "tool_calls")

    def __init__(self, provider: str, model_id: str) -> None:
        super().__init__(provider, model_id)
        self.usage: dict[str, Any] = {}
        self.tool_calls = 0

    def on_event(self, sse: SSEEvent) -> Sequence[ModelEvent]:
        chunk = decode_json(sse.data)
        if isinstance(chunk, list):  # a proxy that forwards the non-SSE array shape
            chunk = chunk[0] if chunk else {}
        if not isinstance(chunk, dict):
            raise TypeError("a chunk must be an object")
        if chunk.get("error"):
            raise _google_error(chunk["error"], self.provider)
        self.response_id = chunk.get("responseId") or self.response_id
        self.response_model = chunk.get("modelVersion") or self.response_model
        if isinstance(chunk.get("usageMetadata"), dict):
            self.usage = chunk["usageMetadata"]
        blocked = (chunk.get("promptFeedback") or {}).get("blockReason")
        if blocked:
            self.stop_reason = blocked
        candidates: list[dict[str, Any]] = chunk.get("candidates") or []
        if not candidates:
            return NO_EVENTS
        candidate = candidates[0]
        if candidate.get("finishReason"):
            self.stop_reason = candidate["finishReason"]
        parts: list[dict[str, Any]] = (candidate.get("content") or {}).get("parts") or []
        events: list[ModelEvent] = []
        for part in parts:
            events += self._on_part(part)
        if candidate.get("groundingMetadata"):  # what a Google Search grounded answer rests on
            events += gemini_grounding_sources(candidate["groundingMetadata"])
        return events

    def _on_part(self, part: dict[str, Any]) -> Sequence[ModelEvent]:
        text = part.get("text")
        if text:
            return (ReasoningDelta(text),) if part.get("thought") else (TextDelta(text),)
        call = part.get("functionCall")
        if not isinstance(call, dict):
            # An image the model made, or an empty text part carrying only a thought signature.
            made = None if part.get("thought") else gemini_inline_file(part)
            return NO_EVENTS if made is None else (made,)
        self.tool_calls += 1
        call_id = call.get("id") or f"call_{uuid.uuid4().hex[:24]}"
        name = call["name"]
        args = call.get("args") or {}
        if not isinstance(args, dict):
            raise TypeError("functionCall.args must be an object")
        raw = json.dumps(args, ensure_ascii=False)
        signature = part.get("thoughtSignature")
        metadata = {"google": {"thoughtSignature": signature}} if isinstance(signature, str) and signature else None
        return ToolInputStart(call_id, name), ToolInputDelta(call_id, raw), ToolCall(call_id, name, args, raw, metadata)

    def finish(self) -> Iterator[ModelEvent]:
        reason = map_gemini_finish_reason(self.stop_reason)
        if reason == "stop" and self.tool_calls:
            reason = "tool-calls"  # Gemini says STOP after function calls too
        try:
            usage = _usage(self.usage)
        except (TypeError, ValueError):
            raise self.invalid_usage(self.usage) from None
        metadata = None if self.stop_reason == "STOP" else {"google": {"finish_reason": self.stop_reason}}
        yield self.finish_event(reason, usage, metadata)


def _google_error(err: Any, provider: str) -> ProviderError:
    """An error chunk inside the stream: ``{"code": 503, "message", "status": "UNAVAILABLE"}``."""
    if not isinstance(err, dict):
        return ProviderError(str(err), body={"error": err}, provider=provider)
    code = err.get("code")
    return ProviderError(
        str(err.get("message") or "an error occurred during streaming"),
        code=None if code is None else str(code),
        type=err.get("status"),
        body={"error": err},
        provider=provider,
    )


def _usage(raw: dict[str, Any]) -> Usage:
    prompt = int(raw.get("promptTokenCount") or 0) + int(raw.get("toolUsePromptTokenCount") or 0)
    thoughts = int(raw.get("thoughtsTokenCount") or 0)
    output = int(raw.get("candidatesTokenCount") or 0) + thoughts
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=int(raw.get("totalTokenCount") or prompt + output),
        reasoning_tokens=thoughts,
        cached_input_tokens=int(raw.get("cachedContentTokenCount") or 0),
    )


# -- request helpers -----------------------------------------------------------------------------


def _contents(request: ModelRequest, gemini_3: bool, provider: str) -> list[dict[str, Any]]:
    """``gemini_3``: a Gemini 3 model (or later), which wants its calls signed and takes a tool's
    files inside the function response."""
    out: list[dict[str, Any]] = []
    results: dict[str, Any] | None = None  # the content holding the latest step's results
    for message in request.messages:
        if isinstance(message, ToolMessage):
            if results is None:
                results = {"role": "user", "parts": []}
                out.append(results)
            response, files = _function_response(message, gemini_3, provider)
            # The results of parallel calls: one content, their responses first, any files after.
            responses = sum("functionResponse" in part for part in results["parts"])
            results["parts"].insert(responses, response)
            results["parts"] += files
            continue
        results = None
        if isinstance(message, UserMessage):
            content = message.content
            user = [{"text": content}] if isinstance(content, str) else [_part(p, provider) for p in content]
            out.append({"role": "user", "parts": user})
        elif isinstance(message, AssistantMessage):
            parts = _model_parts(message, gemini_3)
            if parts:  # the API rejects a content without parts
                out.append({"role": "model", "parts": parts})
    return out


def _model_parts(message: AssistantMessage, sign_calls: bool) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"text": message.text}] if message.text else []
    for n, call in enumerate(message.tool_calls):
        part: dict[str, Any] = {"functionCall": {"id": call.id, "name": call.name, "args": call.input}}
        signature = ((call.provider_metadata or {}).get("google") or {}).get("thoughtSignature")
        if signature:
            part["thoughtSignature"] = signature  # as Gemini gave it: its reasoning continues
        elif sign_calls and n == 0:  # only the first of parallel calls is signed
            part["thoughtSignature"] = _SKIP_SIGNATURE
        parts.append(part)
    return parts


#: What Gemini reads besides text (``text/*`` files go as text): its image types, PDFs, audio, video.
_GEMINI_IMAGES = frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"})


def _part(part: TextPart | FilePart, provider: str) -> dict[str, Any]:
    """A text or file part as a Gemini part: ``inlineData`` for bytes, ``fileData`` for a URL."""
    file = text_or_file(part, provider)
    if isinstance(file, str):  # text, or a text/* file's content
        return {"text": file}
    kind = file.kind
    if (kind == "image" and file.media_type not in _GEMINI_IMAGES) or kind == "other":
        raise unsupported(file, provider)
    if file.data is None:
        return {"fileData": {"mimeType": file.media_type, "fileUri": file.url}}
    return {"inlineData": {"mimeType": file.media_type, "data": file.data}}


def _function_response(
    message: ToolMessage, gemini_3: bool, provider: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A tool result as a ``functionResponse`` part, and the parts of the files it returned that
    go beside it (a model before Gemini 3 takes files only as parts of the content)."""
    key = "error" if message.is_error else "output"
    tool_parts = message.parts
    files: list[dict[str, Any]] = []
    if tool_parts is None:
        output = message.output if isinstance(message.output, (dict, list)) else tool_output_text(message)
    else:
        mapped = tool_blocks(tool_parts, lambda part, _: _part(part, provider))
        output = "\n".join(p["text"] for p in mapped if "text" in p)
        files = [p for p in mapped if "text" not in p]
    response: dict[str, Any] = {"id": message.tool_call_id, "name": message.tool_name, "response": {key: output}}
    if files and gemini_3:
        response["parts"] = files
        files = []
    return {"functionResponse": response}, files


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name, "parametersJsonSchema": parameters}
    if description:
        function["description"] = description
    return function


def _tool_choice(choice: Any) -> dict[str, Any]:
    if isinstance(choice, dict):
        return {"mode": "ANY", "allowedFunctionNames": [choice.get("tool_name") or choice.get("name")]}
    return dict(_TOOL_CHOICE.get(choice, _TOOL_CHOICE["auto"]))


def _generation_config(request: ModelRequest) -> dict[str, Any]:
    s = request.settings
    config: dict[str, Any] = {}
    for key, value in (
        ("temperature", s.temperature),
        ("topP", s.top_p),
        ("maxOutputTokens", s.max_output_tokens),
        ("stopSequences", s.stop),
        ("seed", s.seed),
    ):
        if value is not None:
            config[key] = value
    if request.output is not None:
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = request.output.json_schema
    return config
