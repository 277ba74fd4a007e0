"""The typed objects that cross the plugin boundary.

Field names are the public contract. Every context carries the turn's ``session`` (seen through
:class:`SessionView`: ``id``, ``settings``, ``state``, ``state_for(plugin)``), the
``request_id`` of the turn and its ``body`` (the extra client data the entry point was given),
so a hook never needs to reach back into the session for what its turn is about.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Annotated, Any, Literal, Protocol, get_args, runtime_checkable

from pydantic import AliasChoices, AliasGenerator, BaseModel, ConfigDict, Field, SkipValidation
from pydantic.alias_generators import to_camel

from .events import Chunk, DocumentSource, GeneratedFile, ModelEvent, UrlSource, Usage
from .models.base import CallSettings, ModelMessage, ModelMessages, ReasoningBlock, ToolCallRequest, ToolChoice
from .tools import AnyTool
from .ui_message import ToolPartState as ToolPartState
from .ui_message import UIMessage as UIMessage

Trigger = Literal[
    "chat", "stream", "save_messages", "submit", "continue", "auto_continue", "websocket", "http"
]
TurnStatus = Literal["completed", "error", "aborted", "skipped"]
ErrorStage = Literal["parse", "persist", "turn", "stream"]
ErrorClassification = Literal["context_overflow", "rate_limit", "transient", "fatal", "unknown"]
ERROR_CLASSIFICATIONS: tuple[str, ...] = get_args(ErrorClassification)

#: An item of ``StepResult.sources``: a :class:`~think_core.events.UrlSource` or a
#: :class:`~think_core.events.DocumentSource`, told apart by ``source_type``.
SourceItem = Annotated[UrlSource | DocumentSource, Field(discriminator="source_type")]


@runtime_checkable
class SessionView(Protocol):
    """What a hook sees of the session its turn belongs to.

    ``settings`` are the agent's per-plugin settings (a mapping of plugin name to section);
    ``state`` is a dict shared by every plugin in this session; ``state_for(plugin)`` is a dict
    private to one plugin (pass the plugin object or its name) in this session, so a plugin
    instance shared by concurrent sessions keeps their state apart.
    """

    @property
    def id(self) -> str: ...

    @property
    def settings(self) -> Mapping[str, Any]: ...

    @property
    def state(self) -> dict[str, Any]: ...

    def state_for(self, plugin: object) -> dict[str, Any]: ...


class SessionUsage(BaseModel):
    """The tokens a session's turns used, by model id, as their stored answers record them
    (``metadata["usage"]`` of each assistant message, written with the answer: shared by every
    process on the same store, a turn replayed after a crash counted once)."""

    by_model: dict[str, Usage] = Field(default_factory=dict)

    @property
    def total(self) -> Usage:
        total = Usage()
        for usage in self.by_model.values():
            total = total + usage
        return total


@runtime_checkable
class UsageRecords(Protocol):
    """A session that can say what its turns used (the live session does: ``await
    ctx.session.usage()``). Kept out of :class:`SessionView` so a view without it still is one."""

    async def usage(self) -> SessionUsage: ...


# The live session object is passed through as it is: validating it would copy or reject it.
_SessionField = Annotated[SessionView, SkipValidation]


class _Context(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    session: _SessionField = Field(repr=False)
    request_id: str
    body: dict[str, Any] | None = None
    """The turn's extra client data (``body=`` of the entry point, a request's extra fields), or
    ``None``. A continuation without a body of its own sees the body of the turn it continues."""


class TurnContext(_Context):
    """Argument of ``before_turn``: the turn as the engine assembled it."""

    trigger: Trigger
    system: str
    messages: ModelMessages
    tools: dict[str, Any]
    model: Any
    continuation: bool = False


#: A hook's answer (``TurnConfig``, ``StepConfig``, ``ToolCallDecision``) takes Think's camelCase
#: spellings too (``activeTools``, ``maxSteps`` …), so a ported ``beforeTurn`` works unchanged;
#: a key that names nothing fails closed (the turn fails with a ``PluginResultError`` naming the
#: plugin and the key) instead of being dropped, which would silently widen what a turn may do.
_HOOK_ANSWER = ConfigDict(
    arbitrary_types_allowed=True,
    extra="forbid",
    alias_generator=AliasGenerator(validation_alias=to_camel),
    populate_by_name=True,
)


class TurnConfig(BaseModel):
    """Return value of ``before_turn``. Every field is optional; ``None`` keeps the default.

    ``tools`` is additive (merged over the agent's tools); ``active_tools`` restricts which
    tools the model may call; ``output`` is a pydantic model class or a JSON schema dict.
    ``provider_options`` are deep-merged into the provider's request body, keyed by provider
    name as AI SDK ``providerOptions`` are (``{"openai": {"reasoning_effort": "low"},
    "anthropic": {"thinking": {...}}}``; ``"google"`` or ``"gemini"`` for Gemini): the running
    model takes its own provider's entry and ignores the others'.
    """

    model_config = _HOOK_ANSWER

    model: Any = None
    system: str | None = Field(default=None, validation_alias=AliasChoices("system", "instructions"))
    messages: list[ModelMessage] | None = None
    tools: list[Any] | None = None
    active_tools: list[str] | None = None
    tool_choice: ToolChoice | None = None
    max_steps: int | None = None
    send_reasoning: bool | None = None
    output: Any = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    stop: list[str] | None = Field(default=None, validation_alias=AliasChoices("stop", "stopSequences"))
    seed: int | None = None
    timeout: float | None = None
    headers: dict[str, str] | None = None
    provider_options: dict[str, Any] | None = None

    def call_settings(self, base: CallSettings) -> CallSettings:
        """``base`` with this config's call settings laid over it."""
        overrides = {
            name: value
            for name in CallSettings.model_fields
            if (value := getattr(self, name)) is not None
        }
        return base.model_copy(update=overrides) if overrides else base


class StepToolResult(BaseModel):
    """One settled tool call of a step: its ``output``, or the ``error`` text the model got
    (``output`` is then ``None``). Calls still waiting for a client result or an approval are
    not listed."""

    tool_call_id: str
    tool_name: str
    output: Any = None
    error: str | None = None


class StepResult(_Context):
    """Argument of ``on_step_finish``; also the items of ``StepContext.steps``.

    ``tool_results`` also accepts dicts of :class:`StepToolResult`'s fields, validated into it
    (on assignment too). ``sources`` are what the answer cites
    (:class:`~think_core.events.UrlSource`, :class:`~think_core.events.DocumentSource`),
    ``files`` what the model generated (:class:`~think_core.events.GeneratedFile`).
    ``request`` is the provider request body as sent (credentials travel
    in headers and are never in it; ``None`` for a model that is not an HTTP provider);
    ``response`` has the response's ``id``, ``model`` and ``headers`` (request ids, rate-limit
    state); ``warnings`` say what was dropped on the way (a setting the provider does not
    support).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    step_number: int
    finish_reason: str = "stop"
    text: str = ""
    reasoning_text: str = ""
    #: The reasoning block by block, with what the provider needs back (see ``ReasoningBlock``).
    reasoning_blocks: list[ReasoningBlock] = Field(default_factory=list)
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    tool_results: list[StepToolResult] = Field(default_factory=list)
    #: What the step's answer cites, in order of first mention (each url or document once).
    sources: list[SourceItem] = Field(default_factory=list)
    #: Files the model generated in this step (images ...).
    files: list[GeneratedFile] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model_id: str | None = None
    response_id: str | None = None
    warnings: list[str] = Field(default_factory=list)
    provider_metadata: dict[str, Any] | None = None
    request: dict[str, Any] | None = None
    response: dict[str, Any] | None = None


class StepRetry(BaseModel):
    """``StepContext.retry``: why ``before_step`` fires again for the same step. The step's
    previous attempt (``attempt`` counts from 1 for the first retry) failed before any output
    with ``error``, classified as ``classification``, while ``model`` answered it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    attempt: int
    error: Annotated[BaseException, SkipValidation]
    classification: ErrorClassification | None = None
    model: Any = None


class StepContext(_Context):
    """Argument of ``before_step``. ``retry`` is ``None`` on a step's first attempt."""

    step_number: int
    steps: list[StepResult]
    model: Any
    messages: ModelMessages
    retry: StepRetry | None = None


class StepConfig(BaseModel):
    """Return value of ``before_step``; ``None`` fields keep the turn's values."""

    model_config = _HOOK_ANSWER

    model: Any = None
    active_tools: list[str] | None = None
    tool_choice: ToolChoice | None = None
    system: str | None = Field(default=None, validation_alias=AliasChoices("system", "instructions"))
    messages: list[ModelMessage] | None = None
    provider_options: dict[str, Any] | None = None
    """Deep-merged over the turn's ``provider_options`` for this step (see ``TurnConfig``)."""


class ChunkContext:
    """Argument of ``on_chunk``. A slotted plain class, not a pydantic model: one is built per
    streamed token. ``chunk`` is a :mod:`think_core.events` object with a ``type`` of
    ``text-delta``, ``reasoning-delta``, ``tool-input-start``, ``tool-input-delta``,
    ``tool-call``, ``source`` (a url or document the answer cites), ``file`` (a file the model
    generated) or ``tool-result``; ``session``, ``request_id`` and ``body`` are as on every
    other context."""

    __slots__ = ("session", "request_id", "step_number", "chunk", "body")

    def __init__(
        self,
        session: SessionView,
        request_id: str,
        step_number: int,
        chunk: Chunk,
        body: dict[str, Any] | None = None,
    ) -> None:
        self.session = session
        self.request_id = request_id
        self.step_number = step_number
        self.chunk = chunk
        self.body = body

    def __repr__(self) -> str:
        return f"ChunkContext(request_id={self.request_id!r}, step_number={self.step_number}, chunk={self.chunk!r})"


class ToolCallContext(_Context):
    """Argument of ``before_tool_call``."""

    step_number: int
    tool_call_id: str
    tool_name: str
    input: dict[str, Any]
    tool: Annotated[AnyTool, SkipValidation]
    """The tool being called: ``ctx.tool.annotations.read_only``, ``ctx.tool.name``, ..."""
    messages: ModelMessages
    usage: Usage = Field(default_factory=Usage)
    """The turn's token usage so far, the step whose model called this tool included."""


ToolDecisionAction = Literal["allow", "block", "substitute", "ask"]


class ToolCallDecision(BaseModel):
    """Return value of ``before_tool_call``. Build one with :func:`allow`, :func:`block`,
    :func:`substitute` or :func:`ask`."""

    model_config = _HOOK_ANSWER

    action: ToolDecisionAction
    input: dict[str, Any] | None = None
    reason: str | None = None
    output: Any = None


def allow(input: dict[str, Any] | None = None) -> ToolCallDecision:
    """Run the tool, with ``input`` instead of the model's input when given."""
    return ToolCallDecision(action="allow", input=input)


def block(reason: str | None = None) -> ToolCallDecision:
    """Do not run the tool; the model receives ``reason`` (or a default sentence) as the output."""
    return ToolCallDecision(action="block", reason=reason)


def substitute(output: Any) -> ToolCallDecision:
    """Do not run the tool; the model receives ``output`` as if the tool had returned it."""
    return ToolCallDecision(action="substitute", output=output)


def ask(reason: str | None = None) -> ToolCallDecision:
    """Run the tool only once a human approves it, like a ``needs_approval`` tool: the turn ends
    with the call waiting (an approval request showing ``reason``), and an approval runs it in
    the continuation."""
    return ToolCallDecision(action="ask", reason=reason)


#: What ``transform_stream`` returns: takes a step's model events, returns the events to show.
StreamTransform = Callable[[AsyncIterator[ModelEvent]], AsyncIterator[ModelEvent]]


class ToolCallResultContext(_Context):
    """Argument of ``after_tool_call``. ``input`` is the model's original input; ``success`` is
    ``False`` only when execution (or the decision hook) raised, or the call was
    ``interrupted``: a durable turn's call that started in a process that then died, of a tool
    that is neither idempotent nor read-only, so it was not run again (``error`` says so)."""

    step_number: int
    tool_call_id: str
    tool_name: str
    input: dict[str, Any]
    tool: Annotated[AnyTool | None, SkipValidation] = None
    """The tool that was called (``None`` when the model named no known tool)."""
    messages: ModelMessages = Field(default_factory=list)
    success: bool
    output: Any = None
    error: str | None = None
    duration_ms: float = 0.0
    decision: ToolDecisionAction = "allow"
    interrupted: bool = False
    #: The plugin whose ``before_tool_call`` decided (``None``: no plugin had an opinion).
    decided_by: str | None = None
    #: ``transform_tool_result`` only: an intermediate yield of a streaming tool, not its result.
    preliminary: bool = False


class ChatResponseResult(_Context):
    """Argument of ``on_chat_response``: the end of a turn, after persistence and lock release.

    ``message`` is the assistant message as stored, or ``None`` when the turn stored none (it
    produced no parts, e.g. it failed before any output): never a message that was not saved."""

    message: UIMessage | None = None
    status: Literal["completed", "error", "aborted"]
    continuation: bool = False
    #: A continuation extends the answer it continues (same message): how many of
    #: ``message.parts`` that answer already had. ``added_parts`` are this turn's.
    continued_parts: int = 0
    error: str | None = None
    output: Any = None
    usage: Usage = Field(default_factory=Usage)

    @property
    def added_parts(self) -> list[dict[str, Any]]:
        """The parts this turn added to ``message`` (all of them unless it is a continuation)."""
        return self.message.parts[self.continued_parts :] if self.message else []


class ChatErrorContext(_Context):
    """Argument of ``on_chat_error`` and ``classify_chat_error``."""

    stage: ErrorStage
    messages_persisted: bool = False
    classification: ErrorClassification | None = None


class TurnResult(BaseModel):
    """What the entry points return."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    request_id: str
    status: TurnStatus
    message: UIMessage | None = None
    continuation: bool = False
    error: str | None = None
    output: Any = None
    usage: Usage = Field(default_factory=Usage)
    #: A continuation extends the answer it continues (same message, see
    #: ``Session.continue_last_turn``): how many of ``message.parts`` that answer already had.
    continued_parts: int = 0

    @property
    def added_parts(self) -> list[dict[str, Any]]:
        """The parts this turn added to ``message`` (all of them unless it is a continuation)."""
        return self.message.parts[self.continued_parts :] if self.message else []

    @property
    def text(self) -> str:
        """This turn's text: for a continuation, what it added (``message.text`` is the whole
        answer, the earlier part included)."""
        return "".join(p.get("text", "") for p in self.added_parts if p.get("type") == "text")
