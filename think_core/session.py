"""Sessions: one conversation, its turn lock and every entry path that runs a turn.

Every entry path (``chat``, ``stream``, ``save_messages``, ``continue_last_turn``, durable
``submit_messages``, auto-continuation after tool results, the server) goes through
:meth:`Session._run_turn`, so they all fire the same hooks in the same order (DESIGN §5–§6).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Optional, Union

from .errors import NestedTurnError
from .messages import MessageInput, coerce_messages, new_id, to_model_messages
from .turn import Turn, TurnFailed, TurnOutcome
from .types import ChatErrorContext, ChatResponseResult, TurnResult, UIMessage
from .ui_stream import AssistantMessageBuilder, Emit

if TYPE_CHECKING:
    from .agent import Think

logger = logging.getLogger("think.session")

# The session whose turn the current task is running (tools and hooks run in that context).
_TURN_OWNER: contextvars.ContextVar[Optional["Session"]] = contextvars.ContextVar("think_turn_owner", default=None)

MessagesOrFunction = Union[MessageInput, Callable[[list[UIMessage]], Any]]


@dataclass
class _ActiveTurn:
    request_id: str
    task: Optional[asyncio.Task] = None
    cancel_requested: bool = False


@dataclass
class _TurnRequest:
    trigger: str
    incoming: Any = None  # messages, a function of the history, or None
    continuation: bool = False
    body: Optional[dict[str, Any]] = None
    emit: Emit = None
    request_id: Optional[str] = None
    on_applied: Optional[Callable[[], None]] = None
    should_apply: Optional[Callable[[], bool]] = None
    extras: dict[str, Any] = field(default_factory=dict)


class Session:
    """One conversation. Get it with ``agent.session(id)``; do not construct it directly."""

    def __init__(self, agent: "Think", session_id: str) -> None:
        self.agent = agent
        self.id = session_id
        self.settings = agent.settings
        self.state: dict[str, Any] = {}
        self._plugin_state: dict[str, dict[str, Any]] = {}
        self._lock = asyncio.Lock()
        self._active: dict[str, _ActiveTurn] = {}
        self._opened: Optional[asyncio.Future] = None
        self._approved_calls: set[str] = set()
        agent.store.ensure_session(session_id)

    def __repr__(self) -> str:
        return f"<Session {self.id!r}>"

    # -- plugin state -------------------------------------------------------------------------
    def state_for(self, plugin: Any) -> dict[str, Any]:
        """A dict private to ``plugin`` in this session, so plugin singletons stay session-safe."""
        key = plugin if isinstance(plugin, str) else (self.agent.plugin_manager.get_name(plugin) or str(id(plugin)))
        return self._plugin_state.setdefault(key, {})

    # -- opening ----------------------------------------------------------------------------------
    async def open(self) -> "Session":
        """Fire ``configure_session`` (once per process) and start recovering durable submissions.
        Every entry path awaits this; call it yourself to surface plugin errors early."""
        if self._opened is None:
            self._opened = asyncio.get_running_loop().create_future()
            try:
                await self.agent.hooks.configure_session(self)
            except BaseException as exc:
                self._opened.set_exception(exc)
                self._opened.exception()  # mark retrieved: the error is raised to every caller below
                raise
            self._opened.set_result(None)
            self._after_open()
            return self
        await asyncio.shield(self._opened)
        return self

    def _after_open(self) -> None:
        """Extension point for durable submissions (see ``submissions``)."""

    # -- history ------------------------------------------------------------------------------------
    async def messages(self) -> list[UIMessage]:
        """The persisted UI messages, oldest first."""
        return self.agent.store.list_messages(self.id)

    async def history(self) -> list[UIMessage]:
        """The messages as the model sees them: compacted ranges replaced by their summary."""
        return self.agent.store.history(self.id)

    async def add_messages(self, messages: MessagesOrFunction) -> list[UIMessage]:
        """Append messages to the history without running a turn (allowed inside a turn)."""
        await self.open()
        if callable(messages):
            messages = messages(self.agent.store.list_messages(self.id))
            if asyncio.iscoroutine(messages):
                messages = await messages
        return self.agent.store.append_messages(self.id, coerce_messages(messages))

    # -- entry paths --------------------------------------------------------------------------------
    async def chat(
        self,
        input: MessageInput,
        *,
        body: Optional[dict[str, Any]] = None,
        on_event: Optional[Callable[[dict[str, Any]], Any]] = None,
        request_id: Optional[str] = None,
    ) -> TurnResult:
        """Run a turn for ``input`` (a string, a UI message or a list) and return its result.
        ``on_event`` receives every UI message stream chunk as it is produced."""
        return await self._run_turn(
            _TurnRequest("chat", coerce_messages(input), body=body, emit=on_event, request_id=request_id)
        )

    async def save_messages(
        self, messages: MessagesOrFunction, *, body: Optional[dict[str, Any]] = None
    ) -> TurnResult:
        """Append ``messages`` (or ``fn(history) -> messages``, resolved under the turn lock), then run a turn."""
        incoming = messages if callable(messages) else coerce_messages(messages)
        return await self._run_turn(_TurnRequest("save_messages", incoming, body=body))

    async def continue_last_turn(self, *, body: Optional[dict[str, Any]] = None) -> TurnResult:
        """Run a continuation of the last assistant message (``continuation=True``).
        Skipped when the last message is not the assistant's."""
        self._assert_not_nested("continue_last_turn")
        history = self.agent.store.list_messages(self.id)
        if not history or history[-1].role != "assistant":
            return TurnResult(request_id="", status="skipped", continuation=True)
        return await self._run_turn(_TurnRequest("continue", None, continuation=True, body=body))

    async def stream(
        self,
        input: MessageInput,
        *,
        body: Optional[dict[str, Any]] = None,
        trigger: str = "stream",
        request_id: Optional[str] = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Run a turn and yield its AI SDK UI message stream chunks as they are produced."""
        request = _TurnRequest(trigger, coerce_messages(input), body=body, request_id=request_id or new_id("req"))
        async for chunk in self.stream_request(request):
            yield chunk

    async def stream_request(self, request: _TurnRequest) -> AsyncIterator[dict[str, Any]]:
        """Run ``request`` in a task of its own and yield its chunks (used by the server too)."""
        self._assert_not_nested(request.trigger)
        request.request_id = request.request_id or new_id("req")
        queue: asyncio.Queue = asyncio.Queue()
        done = object()
        request.emit = queue.put_nowait
        task = asyncio.create_task(self._run_turn(request))
        task.add_done_callback(lambda _: queue.put_nowait(done))
        try:
            while True:
                item = await queue.get()
                if item is done:
                    break
                yield item
            await task
        finally:
            if not task.done():
                self.cancel(request.request_id)
                await asyncio.wait([task])
            if task.done() and not task.cancelled():
                task.exception()  # retrieved; a failure was already raised above or is moot

    # -- cancellation -----------------------------------------------------------------------------
    def cancel(self, request_id: str) -> bool:
        """Abort a running or queued turn: its partial message is persisted, status ``aborted``."""
        handle = self._active.get(request_id)
        if handle is None or handle.cancel_requested:
            return False
        handle.cancel_requested = True
        if handle.task is not None and not handle.task.done():
            handle.task.cancel()
        return True

    def cancel_all(self) -> int:
        return sum(self.cancel(rid) for rid in list(self._active))

    @property
    def active_request_ids(self) -> list[str]:
        return list(self._active)

    # -- the one turn runner --------------------------------------------------------------------
    def _assert_not_nested(self, what: str) -> None:
        if _TURN_OWNER.get() is self:
            raise NestedTurnError(
                f"{what}() was called from inside an active turn of session {self.id!r}; "
                "this would wait for itself. Use submit_messages() or add_messages() instead."
            )

    def _is_approved(self, tool_call_id: str) -> bool:
        return tool_call_id in self._approved_calls

    async def _run_turn(self, request: _TurnRequest) -> TurnResult:
        self._assert_not_nested(request.trigger)
        await self.open()
        request_id = request.request_id or new_id("req")
        handle = _ActiveTurn(request_id, asyncio.current_task())
        self._active[request_id] = handle
        agent = self.agent
        builder = AssistantMessageBuilder(new_id(), request.emit, send_reasoning=agent.send_reasoning)
        outcome: Optional[TurnOutcome] = None
        persisted: Optional[UIMessage] = None
        try:
            try:
                await self._lock.acquire()
            except asyncio.CancelledError:
                if handle.cancel_requested and _uncancel():
                    return TurnResult(request_id=request_id, status="aborted", continuation=request.continuation)
                raise
            token = _TURN_OWNER.set(self)
            try:
                outcome, persisted = await self._locked_turn(request, request_id, handle, builder)
            finally:
                _TURN_OWNER.reset(token)
                self._lock.release()
        finally:
            self._active.pop(request_id, None)
        if outcome is None:  # skipped before running
            return TurnResult(request_id=request_id, status="skipped", continuation=request.continuation)
        message = persisted or builder.message()
        await agent.hooks.on_chat_response(
            ChatResponseResult(
                session=self,
                request_id=request_id,
                message=message,
                status=outcome.status,
                continuation=request.continuation,
                error=outcome.error_text,
                output=outcome.output,
                usage=outcome.usage,
            )
        )
        return TurnResult(
            request_id=request_id,
            status=outcome.status,
            message=message,
            continuation=request.continuation,
            error=outcome.error_text,
            output=outcome.output,
            usage=outcome.usage,
        )

    async def _locked_turn(
        self, request: _TurnRequest, request_id: str, handle: _ActiveTurn, builder: AssistantMessageBuilder
    ) -> tuple[Optional[TurnOutcome], Optional[UIMessage]]:
        agent, store = self.agent, self.agent.store
        if request.should_apply is not None and not request.should_apply():
            return None, None
        body = request.body
        if body is None and request.continuation:
            body = store.get_state(self.id, "last_body")
        elif body is not None:
            store.set_state(self.id, "last_body", body)
        builder.start()
        try:
            try:
                incoming = request.incoming
                if callable(incoming):
                    incoming = incoming(store.list_messages(self.id))
                    if asyncio.iscoroutine(incoming):
                        incoming = await incoming
                    incoming = coerce_messages(incoming)
                if incoming:
                    store.append_messages(self.id, incoming)
                if request.on_applied is not None:
                    request.on_applied()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                outcome = await self._fail(TurnFailed(exc, "persist"), request_id, builder, persisted=False)
                return outcome, None
            outcome = await self._drive(request, request_id, body, builder)
        except asyncio.CancelledError:
            builder.abort()
            message = self._persist(builder)
            if handle.cancel_requested and _uncancel():
                return TurnOutcome("aborted", error_text="aborted"), message
            raise
        return outcome, self._persist(builder)

    async def _drive(
        self, request: _TurnRequest, request_id: str, body: Optional[dict[str, Any]], builder: AssistantMessageBuilder
    ) -> TurnOutcome:
        """Run the turn, with the error policy of DESIGN §8 around it."""
        history = to_model_messages(self.agent.store.history(self.id))
        turn = Turn(
            self,
            request_id=request_id,
            trigger=request.trigger,
            continuation=request.continuation,
            body=body,
            builder=builder,
            history=history,
        )
        try:
            outcome = await turn.run()
        except TurnFailed as failure:
            return await self._fail(failure, request_id, builder, persisted=True, usage=turn.usage)
        builder.finish()
        return outcome

    async def _fail(
        self,
        failure: TurnFailed,
        request_id: str,
        builder: AssistantMessageBuilder,
        *,
        persisted: bool,
        usage: Any = None,
        classification: Optional[str] = None,
    ) -> TurnOutcome:
        hooks = self.agent.hooks
        ctx = ChatErrorContext(
            session=self, request_id=request_id, stage=failure.stage,
            messages_persisted=persisted, classification=classification,
        )
        if classification is None:
            ctx.classification = await hooks.classify_chat_error(failure.error, ctx)
        replacement = await hooks.on_chat_error(failure.error, ctx)
        error: BaseException = failure.error
        if isinstance(replacement, BaseException):
            error = replacement
        error_text = replacement if isinstance(replacement, str) else (str(error) or type(error).__name__)
        logger.info("turn %s failed at stage %s: %s", request_id, failure.stage, error_text)
        builder.error(error_text)
        outcome = TurnOutcome(
            "error", error=error, error_text=error_text, stage=failure.stage, classification=ctx.classification
        )
        if usage is not None:
            outcome.usage = usage
        return outcome

    def _persist(self, builder: AssistantMessageBuilder) -> Optional[UIMessage]:
        if not builder.has_content():
            return None
        message = builder.message()
        self.agent.store.upsert_message(self.id, message)
        return message


def _uncancel() -> bool:
    """Absorb a cancellation that ``Session.cancel`` asked for (the turn ends as ``aborted``)."""
    task = asyncio.current_task()
    if task is not None and hasattr(task, "uncancel"):
        task.uncancel()
    return True
