"""The provider-neutral model interface: messages, the request of one step, the ``Model`` protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import (
    Annotated,
    Any,
    Literal,
    Protocol,
    runtime_checkable,
)

from pydantic import BaseModel, ConfigDict, Field

from ..events import ModelEvent


class UserMessage(BaseModel):
    role: Literal["user"] = "user"
    content: str


class ToolCallRequest(BaseModel):
    """A tool call as it appears in an assistant message of the history."""

    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)


class ToolMessage(BaseModel):
    """The result of one tool call, paired with the call by ``tool_call_id``."""

    role: Literal["tool"] = "tool"
    tool_call_id: str
    tool_name: str
    output: Any = None
    is_error: bool = False


ModelMessage = Annotated[
    UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]


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
    """Per-call knobs passed through to the provider. ``None`` = provider default."""

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
    messages: list[ModelMessage] = Field(default_factory=list)
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
