"""Anthropic Messages API streaming.

Request mapping (``reference/providers.md`` §4): the system prompt is top-level; an assistant
turn becomes ``text`` + ``tool_use`` blocks; tool results become ``tool_result`` blocks (paired
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
import os
import re
from contextlib import aclosing
from typing import Any, AsyncIterator

import httpx

from ..events import (
    Finish,
    ModelEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)
from ._http import (
    DEFAULT_TIMEOUT,
    AnyClient,
    call_timeout,
    finish_reading,
    incomplete_stream,
    invalid_event,
    post_event_stream,
    resolve_api_key,
    stream_error,
)
from .base import AssistantMessage, ModelRequest, ToolMessage, UserMessage
from .openai import tool_output_text
from .retry import RetryPolicy, stream_with_retry
from .sse import aiter_sse

__all__ = ["AnthropicModel", "map_anthropic_stop_reason"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool-calls",
    "refusal": "content-filter",
}


def map_anthropic_stop_reason(reason: str | None) -> str:
    """Messages API ``stop_reason`` → the engine's vocabulary (``pause_turn``, unknown → ``other``)."""
    return _STOP_REASONS.get(reason or "", "other")


class AnthropicModel:
    """A :class:`~think_core.models.base.Model` over ``POST {base_url}/v1/messages``.

    ``max_tokens`` is required by the API; ``CallSettings.max_output_tokens`` overrides it per
    call. ``client``: as for :class:`~think_core.models.openai.OpenAIChatModel`.
    """

    #: This model retries transient failures itself before any output, so the engine does not
    #: retry them again (which would multiply the attempts).
    retries_before_output = True

    def __init__(
        self,
        model_id: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: "AnyClient" = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        retry_cap_seconds: float = 60.0,
        retry_policy: RetryPolicy | None = None,
        max_tokens: int = 4096,
        headers: dict[str, str] | None = None,
        anthropic_version: str = ANTHROPIC_VERSION,
    ) -> None:
        self.model_id = model_id
        self.provider = "anthropic"
        self.base_url = (base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self._api_key = resolve_api_key(
            api_key, os.environ.get("ANTHROPIC_API_KEY"), "ANTHROPIC_API_KEY", self.base_url, "anthropic"
        )
        self._client = client
        self._timeout = timeout
        self._retry = retry_policy or RetryPolicy(max_retries=max_retries, cap_seconds=retry_cap_seconds)
        self.max_tokens = max_tokens
        self._headers = dict(headers or {})
        self._version = anthropic_version

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model_id!r}, base_url={self.base_url!r})"

    # -- request -----------------------------------------------------------------------------

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and plugins can inspect it)."""
        return self._build(request)[0]

    def _build(self, request: ModelRequest) -> tuple[dict[str, Any], "_OutputTool | None"]:
        s = request.settings
        body: dict[str, Any] = {
            "model": self.model_id,
            "max_tokens": s.max_output_tokens or self.max_tokens,
            "messages": _messages(request),
            "stream": True,
        }
        if request.system:
            body["system"] = request.system
        tools = [_tool(t.name, t.description, t.parameters) for t in request.tools]
        choice = _tool_choice(request.tool_choice) if tools and request.tool_choice is not None else None
        output = None
        if request.output is not None:
            output = _OutputTool.for_spec(request.output.name, request.output.json_schema, {t["name"] for t in tools})
            forced = {"type": "tool", "name": output.name}
            if isinstance(request.tool_choice, dict) and choice is not None:
                pass  # an explicit choice of a real tool wins
            elif tools and request.tool_choice != "none":
                choice = {"type": "any"}  # a real tool or the answer, but some tool
            else:
                choice = forced
            tools.append(_tool(output.name, output.description, output.schema))
        if tools:
            body["tools"] = tools
            if choice is not None:
                body["tool_choice"] = choice
        for key, value in (("temperature", s.temperature), ("top_p", s.top_p), ("stop_sequences", s.stop)):
            if value is not None:
                body[key] = value
        if s.provider_options:
            body.update(s.provider_options)  # the escape hatch: thinking, metadata, top_k, ...
        return body, output

    def _request_headers(self, request: ModelRequest) -> dict[str, str]:
        headers = {"accept": "text/event-stream", "anthropic-version": self._version}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        headers.update(self._headers)
        if request.settings.headers:
            headers.update(request.settings.headers)
        return headers

    # -- response ----------------------------------------------------------------------------

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one step; retried (per the retry policy) only until the first event."""
        return stream_with_retry(lambda: self._attempt(request), self._retry)

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        body, output = self._build(request)
        async with post_event_stream(
            self._client,
            f"{self.base_url}/v1/messages",
            body=body,
            headers=self._request_headers(request),
            timeout=call_timeout(self._timeout, request.settings.timeout),
            provider=self.provider,
        ) as response:
            async for event in self._parse(response, output):
                yield event

    async def _parse(self, response: httpx.Response, output: "_OutputTool | None") -> AsyncIterator[ModelEvent]:
        blocks: dict[int, _Block] = {}
        usage: dict[str, Any] = {}
        stop_reason: str | None = None
        response_id: str | None = None
        model_id: str | None = None
        tool_calls = 0
        done = False
        loads = json.loads
        async with aclosing(aiter_sse(response.aiter_bytes())) as events:
            async for sse in events:
                try:
                    data = loads(sse.data)
                except ValueError:
                    raise invalid_event(self.provider, sse.data) from None
                if not isinstance(data, dict):
                    raise invalid_event(self.provider, sse.data)
                try:
                    kind = data.get("type") or sse.event
                    if kind == "content_block_delta":
                        delta = data.get("delta") or {}
                        dtype = delta.get("type")
                        if dtype == "text_delta":
                            if delta.get("text"):
                                yield TextDelta(delta["text"])
                        elif dtype == "input_json_delta":
                            block = blocks.get(data.get("index", -1))
                            fragment = delta.get("partial_json") or ""
                            if block is not None and fragment:
                                block.parts.append(fragment)
                                if block.is_output:
                                    if not output or not output.wrapped:
                                        yield TextDelta(fragment)
                                else:
                                    yield ToolInputDelta(block.id, fragment)
                        elif dtype == "thinking_delta":
                            if delta.get("thinking"):
                                yield ReasoningDelta(delta["thinking"])
                    elif kind == "content_block_start":
                        cb = data.get("content_block") or {}
                        ctype = cb.get("type")
                        if ctype == "text" and cb.get("text"):
                            yield TextDelta(cb["text"])
                        elif ctype == "thinking" and cb.get("thinking"):
                            yield ReasoningDelta(cb["thinking"])
                        elif ctype == "tool_use":
                            block = _Block(cb.get("id") or "", cb.get("name") or "", output is not None and cb.get("name") == output.name)
                            blocks[data.get("index", len(blocks))] = block
                            if not block.is_output:
                                yield ToolInputStart(block.id, block.name)
                    elif kind == "content_block_stop":
                        block = blocks.pop(data.get("index", -1), None)
                        if block is not None:
                            for event in block.finish(output):
                                yield event
                            tool_calls += not block.is_output
                    elif kind == "message_delta":
                        stop_reason = (data.get("delta") or {}).get("stop_reason") or stop_reason
                        usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
                    elif kind == "message_start":
                        message = data.get("message") or {}
                        response_id = message.get("id")
                        model_id = message.get("model")
                        usage.update({k: v for k, v in (message.get("usage") or {}).items() if v is not None})
                    elif kind == "message_stop":
                        done = True
                        await finish_reading(events)
                        break
                    elif kind == "error":
                        raise stream_error(data, self.provider, "an error occurred during streaming")
                    # "ping" and unknown event types are ignored
                except (AttributeError, TypeError, ValueError, KeyError):
                    # Valid JSON of the wrong shape (a string where an object belongs, ...).
                    raise invalid_event(self.provider, sse.data) from None
        if not done and stop_reason is None:
            raise incomplete_stream(self.provider)
        for block in blocks.values():  # cut off (e.g. by max_tokens) before content_block_stop
            for event in block.finish(output):
                yield event
            tool_calls += not block.is_output
        reason = map_anthropic_stop_reason(stop_reason)
        if reason == "tool-calls" and not tool_calls:
            reason = "stop"  # only the structured-output tool was called: that is the answer
        try:
            cache_write = int(usage.get("cache_creation_input_tokens") or 0)
            cache_read = int(usage.get("cache_read_input_tokens") or 0)
            input_tokens = int(usage.get("input_tokens") or 0) + cache_write + cache_read
            output_tokens = int(usage.get("output_tokens") or 0)
        except (TypeError, ValueError):
            raise invalid_event(self.provider, json.dumps(usage)) from None
        yield Finish(
            finish_reason=reason,
            usage=Usage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                total_tokens=input_tokens + output_tokens,
                cached_input_tokens=cache_read,
            ),
            response_id=response_id,
            model_id=model_id or self.model_id,
            provider_metadata={"anthropic": {"cache_creation_input_tokens": cache_write}} if cache_write else None,
        )


class _Block:
    """A ``tool_use`` content block being streamed."""

    __slots__ = ("id", "name", "is_output", "parts")

    def __init__(self, id: str, name: str, is_output: bool) -> None:
        self.id = id
        self.name = name
        self.is_output = is_output
        self.parts: list[str] = []

    def finish(self, output: "_OutputTool | None") -> list[ModelEvent]:
        raw = "".join(self.parts)
        if not self.is_output:
            return [ToolCall(self.id, self.name, _parse_input(raw), raw)]
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
    def for_spec(cls, name: str, schema: dict[str, Any], taken: set[str]) -> "_OutputTool":
        base = (re.sub(r"[^a-zA-Z0-9_-]", "_", name) or "output")[:60]
        unique = base
        while unique in taken:
            unique = f"{unique}_"
        if schema.get("type") == "object":
            return cls(unique, schema, False)
        return cls(unique, {"type": "object", "properties": {"value": schema}, "required": ["value"]}, True)


def _parse_input(raw: str) -> dict[str, Any] | None:
    """``{}`` for a tool without arguments (only ``""`` deltas), ``None`` unless a JSON object."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- request helpers -----------------------------------------------------------------------------


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
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
            push("user", message.content)
        elif isinstance(message, AssistantMessage):
            blocks: list[dict[str, Any]] = []
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            for call in message.tool_calls:
                blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input})
            if blocks:  # the API rejects empty content
                push("assistant", blocks)
        elif isinstance(message, ToolMessage):
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": tool_output_text(message),
            }
            if message.is_error:
                result["is_error"] = True
            push("user", [result])
    return out


def _tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "input_schema": parameters}
    if description:
        tool["description"] = description
    return tool


def _tool_choice(choice: Any) -> dict[str, Any]:
    if isinstance(choice, dict):
        return {"type": "tool", "name": choice.get("tool_name") or choice.get("name")}
    return {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}.get(choice, {"type": "auto"})
