"""The provider-neutral model interface: messages, the request of one step, the ``Model`` protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import (
    Annotated,
    Any,
    Literal,
    Protocol,
    runtime_checkable,
)

from pydantic import BaseModel, ConfigDict, Field, ValidatorFunctionWrapHandler, WrapValidator

from ..events import ModelEvent
from .content import ContentPart, FilePart, TextPart, joined_text, tool_output_parts


class UserMessage(BaseModel):
    """A user message: its text, or its parts in order when it holds files (images, documents)."""

    role: Literal["user"] = "user"
    content: str | list[ContentPart]

    @property
    def text(self) -> str:
        """The message's text (its text parts, one after the other)."""
        return self.content if isinstance(self.content, str) else joined_text(self.content)


class ToolCallRequest(BaseModel):
    """A tool call as it appears in an assistant message of the history. ``provider_metadata``:
    what the provider that made the call needs back with it (Gemini's ``thoughtSignature``)."""

    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    provider_metadata: dict[str, Any] | None = None


class ReasoningBlock(BaseModel):
    """One block of a step's reasoning with what its provider needs back to accept it again
    (Anthropic's thinking ``signature``, a redacted block's ``data``), keyed by provider."""

    text: str = ""
    provider_metadata: dict[str, Any] | None = None


class AssistantMessage(BaseModel):
    """One model step of the history. ``reasoning`` is its reasoning text; ``reasoning_blocks``
    the same reasoning block by block with provider metadata, for providers that must get their
    reasoning back (Anthropic refuses a tool-use step with thinking enabled without it)."""

    role: Literal["assistant"] = "assistant"
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    reasoning_blocks: list[ReasoningBlock] = Field(default_factory=list)


class ToolMessage(BaseModel):
    """The result of one tool call, paired with the call by ``tool_call_id``."""

    role: Literal["tool"] = "tool"
    tool_call_id: str
    tool_name: str
    output: Any = None
    is_error: bool = False

    @property
    def parts(self) -> list[TextPart | FilePart] | None:
        """The output's text and files in order when the tool returned files, else ``None``."""
        return None if self.is_error else tool_output_parts(self.output)


ModelMessage = Annotated[
    UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]

_MESSAGE_TYPES = frozenset({UserMessage, AssistantMessage, ToolMessage})


def _messages_as_built(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    # The history goes from the turn to its contexts and the request as message objects that
    # pydantic would pass through unchanged anyway; telling that item by item (a union of
    # models) cost a long chat's turn more than all the rest of it. So a list of exactly these
    # objects is only copied (as validating it did); anything else is validated.
    if type(value) is list and set(map(type, value)) <= _MESSAGE_TYPES:
        return list(value)
    return handler(value)


#: A list of model messages (a field of the request and of the hook contexts).
ModelMessages = Annotated[list[ModelMessage], WrapValidator(_messages_as_built)]


class ToolSpec(BaseModel):
    """What the model is told about a tool."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class OutputSpec(BaseModel):
    """Structured output requested for a turn: a JSON schema with a name."""

    name: str = "output"
    json_schema: dict[str, Any]


class CallSettings(BaseModel):
    """Per-call knobs passed through to the provider. ``None`` = provider default.

    ``provider_options`` are deep-merged into the provider's request body. Keyed by provider
    name, as AI SDK ``providerOptions`` are (``{"openai": {...}, "anthropic": {...}}``), each
    model takes the entry of its own provider and ignores the others'; keys that name no
    provider are merged as they are (the options of whichever model runs).
    """

    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    stop: list[str] | None = None
    seed: int | None = None
    timeout: float | None = None
    headers: dict[str, str] | None = None
    provider_options: dict[str, Any] | None = None


ToolChoice = Literal["auto", "none", "required"] | dict[str, Any]
"""``"auto"`` (default), ``"none"``, ``"required"``, or ``{"type": "tool", "tool_name": NAME}``."""


class ModelRequest(BaseModel):
    """Everything a provider needs to stream one step."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    system: str = ""
    messages: ModelMessages = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: ToolChoice | None = None
    output: OutputSpec | None = None
    settings: CallSettings = Field(default_factory=CallSettings)


@runtime_checkable
class Model(Protocol):
    """A language model that streams one step at a time.

    ``stream`` yields :mod:`think_core.events` objects: deltas, complete ``ToolCall`` events,
    and exactly one ``Finish`` at the end. An error may be raised (before or during the
    stream) or yielded as ``StreamError``; both end the step.
    """

    model_id: str
    provider: str

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...


#: The provider names ``provider_options`` may be keyed by (an entry for another provider than
#: the one running is ignored, never sent as a body key).
PROVIDER_NAMES = frozenset({"openai", "anthropic", "google", "gemini", "vertex", "azure", "http", "scripted"})


def deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` laid over it; nested dicts are merged, anything else replaced."""
    merged = dict(base)
    for key, value in extra.items():
        current = merged.get(key)
        merged[key] = deep_merge(current, value) if isinstance(current, dict) and isinstance(value, Mapping) else value
    return merged


def apply_provider_options(
    body: dict[str, Any], options: Mapping[str, Any] | None, names: Iterable[str]
) -> dict[str, Any]:
    """``body`` with the ``provider_options`` meant for a provider called any of ``names``."""
    if not options:
        return body
    own = set(names)
    flat = {k: v for k, v in options.items() if k not in PROVIDER_NAMES and k not in own}
    body = deep_merge(body, flat)
    for key, value in options.items():
        if key in own and isinstance(value, Mapping):
            body = deep_merge(body, value)
    return body
