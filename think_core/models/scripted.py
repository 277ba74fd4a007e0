"""A deterministic model for tests, benchmarks and the offline demo.

Each call to :meth:`ScriptedModel.stream` plays the next scripted :class:`Step`: reasoning,
text (streamed in small pieces), the sources it cites and the files it made, tool calls
(streamed as input fragments), usage, and optionally an error — raised before any output, or arriving in the stream after some text.
A step may also be a function of the request, for scripts that react to what they are sent.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..events import (
    DocumentSource,
    Finish,
    GeneratedFile,
    ModelEvent,
    ReasoningDelta,
    StreamError,
    TextDelta,
    ToolCall,
    ToolInputDelta,
    ToolInputStart,
    UrlSource,
    Usage,
)
from .base import ModelRequest

_PIECES = re.compile(r"\S+\s*|\s+")


@dataclass
class ScriptedToolCall:
    name: str
    input: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass
class Step:
    """One scripted model step.

    ``error`` is raised before any output unless ``error_after_output`` is set, in which case
    the step's text and reasoning are streamed first and the error arrives in the stream.
    ``input`` of a tool call may be a raw string, to script invalid JSON. ``sources`` and
    ``files`` are streamed after the text, as a provider's citations and generated images.
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    sources: list[UrlSource | DocumentSource] = field(default_factory=list)
    files: list[GeneratedFile] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None
    error: BaseException | None = None
    error_after_output: bool = False
    error_as_event: bool = False

    def __post_init__(self) -> None:
        calls = []
        for item in self.tool_calls:
            if isinstance(item, ToolCall):  # the stream event: accepted for convenience
                item = ScriptedToolCall(item.tool_name, item.input if item.input is not None else item.raw_input, item.tool_call_id)
            if not isinstance(item, ScriptedToolCall):
                raise TypeError(f"Step.tool_calls takes call(name, input) objects, got {item!r}")
            calls.append(item)
        self.tool_calls = calls


ScriptEntry = Step | str | Callable[[ModelRequest], "Step | str"]


def call(name: str, input: dict[str, Any] | str | None = None, id: str | None = None) -> ScriptedToolCall:
    """A scripted tool call."""
    return ScriptedToolCall(name=name, input=input if input is not None else {}, id=id)


class ScriptedModel:
    """Plays scripted steps in order. ``requests`` records every :class:`ModelRequest` received.

    :param steps: ``Step`` objects, plain strings (a text-only step) or callables of the request.
    :param delay: seconds to sleep before each streamed piece (to simulate a slow provider).
    :param repeat: replay the script from the start when it runs out (for long runs).
    :param record: keep every request in ``requests`` (tests read them); off for a model that
        serves for long, such as ``--model demo``, whose memory would grow with every turn.
    """

    provider = "scripted"

    def __init__(
        self,
        steps: Sequence[ScriptEntry] = (),
        *,
        delay: float = 0.0,
        repeat: bool = False,
        model_id: str = "scripted",
        record: bool = True,
    ) -> None:
        self.steps = list(steps)
        self.delay = delay
        self.repeat = repeat
        self.model_id = model_id
        self.requests: list[ModelRequest] = []
        self.record = record
        self._position = 0
        self._call_counter = 0
        self._streams = 0  # requests streamed (recorded or not)

    def add(self, *steps: ScriptEntry) -> None:
        self.steps.extend(steps)

    def _next_step(self, request: ModelRequest) -> Step:
        if self._position >= len(self.steps):
            if not self.repeat or not self.steps:
                raise RuntimeError(
                    f"ScriptedModel ran out of steps after {len(self.steps)} step(s)"
                )
            self._position = 0
        entry = self.steps[self._position]
        self._position += 1
        if callable(entry) and not isinstance(entry, Step):
            entry = entry(request)
        return Step(text=entry) if isinstance(entry, str) else entry

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self._streams += 1
        if self.record:
            self.requests.append(request)
        step = self._next_step(request)
        if step.error is not None and not step.error_after_output:
            raise step.error
        delay = self.delay
        for piece in _PIECES.findall(step.reasoning):
            if delay:
                await asyncio.sleep(delay)
            yield ReasoningDelta(piece)
        for piece in _PIECES.findall(step.text):
            if delay:
                await asyncio.sleep(delay)
            yield TextDelta(piece)
        if step.error is not None:
            if step.error_as_event:
                yield StreamError(step.error)
                return
            raise step.error
        for made in (*step.sources, *step.files):
            yield made
        for scripted in step.tool_calls:
            self._call_counter += 1
            call_id = scripted.id or f"call_{self._call_counter}"
            raw = scripted.input if isinstance(scripted.input, str) else json.dumps(scripted.input)
            yield ToolInputStart(call_id, scripted.name)
            if delay:
                await asyncio.sleep(delay)
            yield ToolInputDelta(call_id, raw)
            yield ToolCall(call_id, scripted.name, _parse_object(raw), raw)
        usage = step.usage or _estimate_usage(request, step)
        reason = step.finish_reason or ("tool-calls" if step.tool_calls else "stop")
        yield Finish(reason, usage, response_id=f"scripted-{self._streams}", model_id=self.model_id)


def _parse_object(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _estimate_usage(request: ModelRequest, step: Step) -> Usage:
    # A rough chars/4 estimate, so usage-driven logic (the proactive guard) has numbers to use.
    prompt_chars = len(request.system) + sum(len(m.model_dump_json()) for m in request.messages)
    output_chars = len(step.text) + len(step.reasoning) + sum(len(str(c.input)) for c in step.tool_calls)
    input_tokens = prompt_chars // 4 + 1
    output_tokens = output_chars // 4 + 1
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens, total_tokens=input_tokens + output_tokens)
