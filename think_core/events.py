"""Typed stream events.

A :class:`~think_core.models.base.Model` yields these while it streams a step, and the
engine hands the same objects to ``on_chunk`` plugins (wrapped in a ``ChunkContext``), plus
``ToolResult`` events once tools have run.

They are slotted dataclasses rather than pydantic models on purpose: one is created per
streamed token, and this is the hot path (see ``bench/stream_overhead.py``).
"""

from __future__ import annotations

from binascii import a2b_base64
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel


class Usage(BaseModel):
    """Token usage of one step or, summed, of a whole turn. ``0`` means not reported."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
        )


@dataclass(slots=True)
class TextDelta:
    text: str
    type: ClassVar[str] = "text-delta"


@dataclass(slots=True)
class ReasoningDelta:
    """Reasoning text. ``provider_metadata`` is what the provider needs sent back with this
    reasoning on later requests (Anthropic's ``signature`` of a thinking block, the ``data`` of a
    redacted one), keyed by provider; a delta that only carries it has no text."""

    text: str
    provider_metadata: dict[str, Any] | None = None
    type: ClassVar[str] = "reasoning-delta"


@dataclass(slots=True)
class ToolInputStart:
    tool_call_id: str
    tool_name: str
    type: ClassVar[str] = "tool-input-start"


@dataclass(slots=True)
class ToolInputDelta:
    tool_call_id: str
    delta: str
    type: ClassVar[str] = "tool-input-delta"


@dataclass(slots=True)
class ToolCall:
    """A complete tool call. ``input`` is ``None`` when ``raw_input`` was not a JSON object.
    ``provider_metadata``: what the provider needs sent back with the call (Gemini's
    ``thoughtSignature``), keyed by provider."""

    tool_call_id: str
    tool_name: str
    input: dict[str, Any] | None
    raw_input: str = ""
    provider_metadata: dict[str, Any] | None = None
    type: ClassVar[str] = "tool-call"


@dataclass(slots=True)
class ToolResult:
    """The result of a tool call (``preliminary`` for the intermediate yields of a generator tool)."""

    tool_call_id: str
    tool_name: str
    output: Any = None
    error: str | None = None
    preliminary: bool = False
    type: ClassVar[str] = "tool-result"


@dataclass(slots=True)
class UrlSource:
    """A web page the answer cites or was grounded on (an Anthropic web search citation, an
    OpenAI ``url_citation`` annotation, a Gemini grounding chunk): the AI SDK's ``source`` of
    ``sourceType: "url"``, a ``source-url`` part of the answer. ``id`` is unique in the turn;
    ``provider_metadata`` is what the provider said of it besides (the cited text), by provider."""

    id: str
    url: str
    title: str | None = None
    provider_metadata: dict[str, Any] | None = None
    source_type: Literal["url"] = field(default="url", kw_only=True)
    type: ClassVar[str] = "source"


@dataclass(slots=True)
class DocumentSource:
    """A document the answer cites (an Anthropic citation of a document in the prompt, an OpenAI
    ``file_citation``): the AI SDK's ``source`` of ``sourceType: "document"``, a
    ``source-document`` part of the answer."""

    id: str
    media_type: str
    title: str
    filename: str | None = None
    provider_metadata: dict[str, Any] | None = None
    source_type: Literal["document"] = field(default="document", kw_only=True)
    type: ClassVar[str] = "source"


Source = UrlSource | DocumentSource


@dataclass(slots=True)
class GeneratedFile:
    """A file the model generated (an image from Gemini or the Responses API's image generation
    tool): ``base64`` holds its bytes, or ``url`` says where it is. A ``file`` part of the answer
    (its ``url`` a ``data:`` URL when the bytes came inline). Kept as base64 text, as the
    provider sent it, so a step record stays JSON all the way to the store."""

    media_type: str
    base64: str | None = None
    url: str | None = None
    provider_metadata: dict[str, Any] | None = None
    type: ClassVar[str] = "file"

    def __post_init__(self) -> None:
        if self.base64 is None and self.url is None:
            raise ValueError("a generated file needs its base64 data or a url")

    @property
    def data(self) -> bytes:
        """The file's bytes (empty when the provider gave only a ``url``)."""
        return a2b_base64(self.base64) if self.base64 is not None else b""

    @property
    def data_url(self) -> str:
        """Where a client finds the file: its ``url``, else a ``data:`` URL of its bytes."""
        if self.base64 is not None:
            return f"data:{self.media_type};base64,{self.base64}"
        assert self.url is not None
        return self.url


@dataclass(slots=True)
class Finish:
    """The end of a step's stream, with the provider's finish reason mapped to one vocabulary:
    ``stop``, ``length``, ``tool-calls``, ``content-filter``, ``error``, ``other``."""

    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    response_id: str | None = None
    model_id: str | None = None
    provider_metadata: dict[str, Any] | None = None
    type: ClassVar[str] = "finish"


@dataclass(slots=True)
class StreamError:
    """An error event that arrived inside the model stream (the engine raises it as the turn error)."""

    error: BaseException
    type: ClassVar[str] = "error"


ModelEvent = (
    TextDelta | ReasoningDelta | ToolInputStart | ToolInputDelta | ToolCall | UrlSource | DocumentSource
    | GeneratedFile | Finish | StreamError
)
Chunk = (
    TextDelta | ReasoningDelta | ToolInputStart | ToolInputDelta | ToolCall | UrlSource | DocumentSource
    | GeneratedFile | ToolResult
)
