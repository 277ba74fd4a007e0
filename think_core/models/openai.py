"""OpenAI Chat Completions streaming, for OpenAI and every OpenAI-compatible server.

The Chat Completions wire format is the lingua franca of model servers (Ollama, vLLM,
llama.cpp, Groq, OpenRouter, DeepSeek, Azure), so this one class covers all of them through
``base_url``. It is written against the quirks seen in the wild (``reference/providers.md``
§2): tool-call deltas without ``index``, ``choices: []`` chunks, usage on the finish chunk,
reasoning text in ``reasoning_content`` or ``reasoning``, error objects inside a 200 stream.

API keys: ``api_key=None`` reads ``OPENAI_API_KEY``; ``api_key=""`` sends no key. With no key,
a loopback ``base_url`` (a local server) works keyless and anything else raises
``ConfigurationError`` at construction, before any request.

Azure: ``OpenAIChatModel(deployment, base_url="https://R.openai.azure.com/openai/deployments/D",
api_key="", headers={"api-key": KEY}, query={"api-version": "2024-10-21"})``.
"""

from __future__ import annotations

import json
import os
import re
import uuid
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
from .retry import RetryPolicy, stream_with_retry
from .sse import aiter_sse

__all__ = ["OpenAIChatModel", "map_openai_finish_reason"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "content_filter": "content-filter",
}


def map_openai_finish_reason(reason: str | None) -> str:
    """Chat Completions ``finish_reason`` → the engine's vocabulary (unknown → ``other``)."""
    return _FINISH_REASONS.get(reason or "", "other")


class OpenAIChatModel:
    """A :class:`~think_core.models.base.Model` over ``POST {base_url}/chat/completions``.

    ``client``: a shared ``httpx.AsyncClient`` gives connection reuse across calls (it is never
    closed here); without one, each call uses its own short-lived client.
    ``max_tokens_param``: the body field for ``max_output_tokens``; by default
    ``max_completion_tokens`` for api.openai.com (reasoning models require it) and the widely
    supported ``max_tokens`` for other servers.
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
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
        provider: str = "openai",
        max_tokens_param: str | None = None,
    ) -> None:
        self.model_id = model_id
        self.provider = provider
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self._api_key = resolve_api_key(
            api_key, os.environ.get("OPENAI_API_KEY"), "OPENAI_API_KEY", self.base_url, provider
        )
        self._client = client
        self._timeout = timeout
        self._retry = retry_policy or RetryPolicy(max_retries=max_retries, cap_seconds=retry_cap_seconds)
        self._headers = dict(headers or {})
        self._query = dict(query or {})
        self._max_tokens_param = max_tokens_param or (
            "max_completion_tokens" if "api.openai.com" in self.base_url else "max_tokens"
        )

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model_id!r}, base_url={self.base_url!r})"

    # -- request -----------------------------------------------------------------------------

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and plugins can inspect it)."""
        body: dict[str, Any] = {
            "model": self.model_id,
            "messages": _messages(request),
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
                "json_schema": {"name": _schema_name(request.output.name), "schema": request.output.json_schema},
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
        if s.provider_options:
            body.update(s.provider_options)  # the escape hatch: reasoning_effort, user, ...
        return body

    def _request_headers(self, request: ModelRequest) -> dict[str, str]:
        headers = {"accept": "text/event-stream"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        headers.update(self._headers)
        if request.settings.headers:
            headers.update(request.settings.headers)
        return headers

    # -- response ----------------------------------------------------------------------------

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one step; retried (per the retry policy) only until the first event."""
        return stream_with_retry(lambda: self._attempt(request), self._retry)

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async with post_event_stream(
            self._client,
            f"{self.base_url}/chat/completions",
            body=self.build_body(request),
            headers=self._request_headers(request),
            params=self._query,
            timeout=call_timeout(self._timeout, request.settings.timeout),
            provider=self.provider,
        ) as response:
            async for event in self._parse(response):
                yield event

    async def _parse(self, response: httpx.Response) -> AsyncIterator[ModelEvent]:
        calls = _ToolCalls()
        finish_reason: str | None = None
        usage: dict[str, Any] | None = None
        response_id: str | None = None
        model_id: str | None = None
        fingerprint: str | None = None
        done = False
        loads = json.loads
        async with aclosing(aiter_sse(response.aiter_bytes())) as events:
            async for sse in events:
                data = sse.data
                if data.startswith("[DONE]"):
                    done = True
                    await finish_reading(events)
                    break
                try:
                    chunk = loads(data)
                except ValueError:
                    raise invalid_event(self.provider, data) from None
                if not isinstance(chunk, dict):
                    continue
                if chunk.get("error"):
                    raise stream_error(chunk, self.provider, "an error occurred during streaming")
                try:
                    if response_id is None:
                        response_id = chunk.get("id") or None
                        model_id = chunk.get("model") or None
                        fingerprint = chunk.get("system_fingerprint")
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    choices = chunk.get("choices") or ()
                    if not isinstance(choices, (list, tuple)):
                        raise invalid_event(self.provider, data)
                    for choice in choices:
                        if not isinstance(choice, dict):
                            raise invalid_event(self.provider, data)
                        delta = choice.get("delta")
                        if delta is not None and not isinstance(delta, dict):
                            raise invalid_event(self.provider, data)
                        if delta:
                            content = delta.get("content")
                            if content:
                                yield TextDelta(content)
                            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                            if reasoning and isinstance(reasoning, str):
                                yield ReasoningDelta(reasoning)
                            refusal = delta.get("refusal")
                            if refusal:
                                yield TextDelta(refusal)
                            tool_deltas = delta.get("tool_calls")
                            if tool_deltas:
                                for event in calls.add(tool_deltas):
                                    yield event
                        if choice.get("finish_reason"):
                            finish_reason = choice["finish_reason"]
                except (AttributeError, TypeError, ValueError, KeyError):
                    # Valid JSON of the wrong shape (a string where an object belongs, ...).
                    raise invalid_event(self.provider, data) from None
        if not done and finish_reason is None:
            raise incomplete_stream(self.provider)
        for event in calls.complete():
            yield event
        reason = map_openai_finish_reason(finish_reason) if finish_reason else ("stop" if done else "other")
        if calls and reason == "stop":
            reason = "tool-calls"  # some compatible servers report "stop" after tool calls
        try:
            final_usage = _usage(usage)
        except (AttributeError, TypeError, ValueError):
            raise invalid_event(self.provider, json.dumps(usage)) from None
        yield Finish(
            finish_reason=reason,
            usage=final_usage,
            response_id=response_id,
            model_id=model_id or self.model_id,
            provider_metadata={"openai": {"system_fingerprint": fingerprint}} if fingerprint else None,
        )


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

    def _slot_for(self, tc: dict[str, Any]) -> "_Slot":
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
            out.append(ToolCall(slot.id, slot.name, _parse_input(raw), raw))
        return out


class _Slot:
    __slots__ = ("id", "name", "parts", "started")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.parts: list[str] = []
        self.started = False


def _parse_input(raw: str) -> dict[str, Any] | None:
    """The call's input: ``{}`` for empty arguments, ``None`` unless it is a JSON object."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


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


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        if isinstance(message, UserMessage):
            messages.append({"role": "user", "content": message.content})
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
            messages.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": tool_output_text(message)})
    return messages


def tool_output_text(message: ToolMessage) -> str:
    """A tool result as the string the model reads (JSON for anything but a string)."""
    output = message.output
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(output)


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


_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def _schema_name(name: str) -> str:
    """``response_format`` names must match ``[a-zA-Z0-9_-]{1,64}``."""
    return (_SCHEMA_NAME.sub("_", name) or "output")[:64]
