"""Sessions: one conversation, its turn lock and every entry path that runs a turn.

Every entry path (``chat``, ``stream``, ``save_messages``, ``continue_last_turn``, durable
``submit_messages``, auto-continuation after tool results, the server) goes through
:meth:`Session._run_turn`, so they all fire the same hooks in the same order (DESIGN §5–§6).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from contextlib import aclosing
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Optional,
    Union,
)

from .compaction import CompactionResult, TokenCounter, compact_session, estimate_tokens
from .errors import NestedTurnError
from .events import Usage
from .messages import (
    MessageInput,
    coerce_messages,
    new_id,
    to_model_messages,
)
from .store import Submission
from .submissions import SubmissionQueue, SubmitResult
from .tool_results import Settle, apply_answer, approval_update, result_update
from .turn import Turn, TurnFailed, TurnOutcome
from .types import ChatErrorContext, ChatResponseResult, TurnResult, UIMessage
from .ui_stream import AssistantMessageBuilder, Emit

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from .agent import Think
    from .transcript import ClientTranscript

logger = logging.getLogger("think.session")

# The session whose turn the current task is running (tools and hooks run in that context).
_TURN_OWNER: contextvars.ContextVar[Optional["Session"]] = contextvars.ContextVar("think_turn_owner", default=None)

MessagesOrFunction = Union[MessageInput, Callable[[list[UIMessage]], Any]]


@dataclass
class _ActiveTurn:
    request_id: str
    task: Optional[asyncio.Task] = None
    cancel_requested: bool = False
    body: Optional[dict[str, Any]] = None


@dataclass
class _TurnRequest:
    trigger: str
    incoming: Any = None  # messages, a function of the history, or None
    continuation: bool = False
    body: Optional[dict[str, Any]] = None
    emit: Emit = None
    request_id: Optional[str] = None
    apply_incoming: Optional[Callable[[], Awaitable[Any]]] = None  # applies the messages itself (submissions)
    should_apply: Optional[Callable[[], Awaitable[bool]]] = None


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
        self._submissions = SubmissionQueue(self)
        self._compact_after: Optional[tuple[int, Optional[TokenCounter]]] = None
        self.compaction_events: list[CompactionResult] = []
        self.last_input_tokens = 0  # input tokens of the latest step, for the proactive guard
        self._background: set[asyncio.Task] = set()

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
        while True:
            if self._opened is None:
                opening = self._opened = asyncio.get_running_loop().create_future()
                try:
                    await self.agent.db.ensure_session(self.id)
                    await self.agent.hooks.configure_session(self)
                    await self._submissions.recover()
                except BaseException as exc:
                    # Callers waiting on this attempt get its error; the next caller tries
                    # again (a cancelled or failed first open must not break the session).
                    self._opened = None
                    opening.set_exception(exc)
                    opening.exception()  # retrieved: each waiter re-raises it below
                    raise
                # Waiters resume only after this task has gone on to queue for the turn lock,
                # so concurrent first calls keep their order.
                opening.set_result(None)
                return self
            attempt = self._opened
            try:
                await asyncio.shield(attempt)
                return self
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if attempt.done() and not attempt.cancelled() and task is not None and not task.cancelling():
                    continue  # the opener was cancelled, not us: open again ourselves
                raise

    # -- history ------------------------------------------------------------------------------------
    async def messages(self) -> list[UIMessage]:
        """The persisted UI messages, oldest first."""
        return await self.agent.db.list_messages(self.id)

    async def history(self) -> list[UIMessage]:
        """The messages as the model sees them: compacted ranges replaced by their summary."""
        return await self.agent.db.history(self.id)

    async def add_messages(self, messages: MessagesOrFunction) -> list[UIMessage]:
        """Append messages to the history without running a turn (allowed inside a turn)."""
        await self.open()
        if callable(messages):
            messages = messages(await self.agent.db.list_messages(self.id))
            if asyncio.iscoroutine(messages):
                messages = await messages
        return await self.agent.db.append_messages(self.id, coerce_messages(messages))

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
        ``on_event`` (a plain function) receives every UI message stream chunk as it is produced."""
        _check_callback(on_event)
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
        history = await self.agent.db.list_messages(self.id)
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
        # aclosing: closing this stream early aborts the turn now, not when the GC gets to it.
        async with aclosing(self.stream_request(request)) as chunks:
            async for chunk in chunks:
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

    # -- durable submissions -----------------------------------------------------------------------
    async def submit_messages(
        self,
        messages: MessageInput,
        *,
        submission_id: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> SubmitResult:
        """Accept ``messages`` durably and return at once; a background drain runs them as a
        turn (trigger ``submit``), FIFO. The same ``idempotency_key`` (or ``submission_id``)
        returns the existing submission with ``accepted=False``. Allowed inside a turn."""
        await self.open()
        return await self._submissions.submit(
            messages, submission_id=submission_id, idempotency_key=idempotency_key, metadata=metadata
        )

    async def inspect_submission(self, submission_id: str) -> Optional[Submission]:
        return await self.agent.db.get_submission(self.id, submission_id)

    async def list_submissions(self, *, status: Optional[str] = None, limit: Optional[int] = None) -> list[Submission]:
        return await self.agent.db.list_submissions(self.id, status=status, limit=limit)

    async def cancel_submission(self, submission_id: str) -> bool:
        return await self._submissions.cancel(submission_id)

    async def wait_for_submission(self, submission_id: str, *, timeout: Optional[float] = None) -> Submission:
        """Wait until the submission is ``completed``, ``error``, ``aborted`` or ``skipped``."""
        await self.open()
        return await self._submissions.wait(submission_id, timeout)

    # -- client tools and approvals -------------------------------------------------------------
    async def add_tool_result(
        self,
        tool_call_id: str,
        output: Any = None,
        *,
        error: Optional[str] = None,
        auto_continue: bool = True,
        on_event: Optional[Callable[[dict[str, Any]], Any]] = None,
        request_id: Optional[str] = None,
    ) -> Optional[TurnResult]:
        """Settle a pending client tool call with ``output`` (or ``error``). When every pending
        call of that assistant message is settled and ``auto_continue`` is set, an
        auto-continuation turn runs and its result is returned."""
        _check_callback(on_event)
        await self.open()
        return await self._settle(tool_call_id, result_update(tool_call_id, output, error), auto_continue, on_event, request_id)

    async def approve_tool_call(
        self,
        tool_call_id: str,
        approved: bool,
        *,
        reason: Optional[str] = None,
        auto_continue: bool = True,
        on_event: Optional[Callable[[dict[str, Any]], Any]] = None,
        request_id: Optional[str] = None,
    ) -> Optional[TurnResult]:
        """Answer an approval request. An approved call runs at the start of the continuation
        (``before_tool_call`` still has the final say); a denied one is answered with an error."""
        _check_callback(on_event)
        await self.open()
        settle = approval_update(tool_call_id, approved, reason)
        return await self._settle(tool_call_id, settle, auto_continue, on_event, request_id)

    async def _settle(
        self,
        tool_call_id: str,
        settle: Settle,
        auto_continue: bool,
        on_event: Optional[Callable[[dict[str, Any]], Any]],
        request_id: Optional[str],
    ) -> Optional[TurnResult]:
        # The read-modify-write holds the turn lock, so it never interleaves with a turn that is
        # writing the same message (one still streaming, or one running approved calls). From
        # inside a turn of this session the lock is already ours.
        request = _TurnRequest("auto_continue", None, continuation=True, emit=on_event, request_id=request_id)
        if _TURN_OWNER.get() is self:
            if await apply_answer(self.agent.db, self.id, tool_call_id, settle) and auto_continue:
                # A continuation cannot run inside the current turn: it runs right after it.
                logger.info("tool result settled inside a turn of %s; the continuation runs after it", self.id)
                self._spawn(self._run_turn(request))
            return None
        applying = asyncio.ensure_future(self._apply_settlement_locked(tool_call_id, settle))
        try:
            # Shielded: a settled call must get its continuation even if this caller is
            # cancelled between the write and the turn (a retry would be ignored as settled).
            found = await asyncio.shield(applying)
        except asyncio.CancelledError:
            if auto_continue:
                applying.add_done_callback(lambda done: self._continue_later(done, request))
            raise
        if found and auto_continue:
            return await self._run_turn(request)
        return None

    async def _apply_settlement_locked(self, tool_call_id: str, settle: Settle) -> bool:
        async with self._lock:
            return await apply_answer(self.agent.db, self.id, tool_call_id, settle)

    def _continue_later(self, applying: asyncio.Future, request: _TurnRequest) -> None:
        if applying.cancelled() or applying.exception() is not None or not applying.result():
            return
        self._spawn(self._run_turn(request))

    def _spawn(self, coro: Any) -> None:
        """Run ``coro`` in the background, outside any turn's context, tracked for ``aclose``."""
        task = asyncio.get_running_loop().create_task(coro, context=contextvars.Context())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def clear(self) -> None:
        """Cancel running and queued turns, wait for them to record their partial answers, then
        delete the history (so nothing written by a cancelled turn reappears afterwards).
        Durable submissions still pending are marked ``skipped``: they belonged to the
        conversation that was cleared."""
        self._assert_not_nested("clear")
        # Skip first, so the drain cannot claim a pending one as the running one is cancelled.
        await self._submissions.skip_pending("skipped: the conversation was cleared")
        self.cancel_all()
        async with self._lock:
            await self.agent.db.clear_messages(self.id)

    async def aclose(self) -> None:
        """Stop this session's background work (pending submissions stay in the store)."""
        await self._submissions.aclose()
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

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

    def turn_body(self, request_id: str) -> Optional[dict[str, Any]]:
        """The ``body`` of the running turn ``request_id`` (for hooks whose context has no body,
        such as ``before_tool_call``), or ``None``."""
        handle = self._active.get(request_id)
        return handle.body if handle is not None else None

    # -- the one turn runner --------------------------------------------------------------------
    def _assert_not_nested(self, what: str) -> None:
        if _TURN_OWNER.get() is self:
            raise NestedTurnError(
                f"{what}() was called from inside an active turn of session {self.id!r}; "
                "this would wait for itself. Use submit_messages() or add_messages() instead."
            )

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
                if _absorb_cancel(handle):
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
        db = self.agent.db
        if request.should_apply is not None and not await request.should_apply():
            return None, None
        body = request.body
        if body is None and request.continuation:
            body = await db.get_state(self.id, "last_body")
        elif body is not None:
            await db.set_state(self.id, "last_body", body)
        handle.body = body
        builder.start()
        try:
            try:
                incoming = request.incoming
                if callable(incoming):
                    incoming = incoming(await db.list_messages(self.id))
                    if asyncio.iscoroutine(incoming):
                        incoming = await incoming
                    incoming = coerce_messages(incoming)
                if incoming:
                    await db.append_messages(self.id, incoming)
                if request.apply_incoming is not None:
                    await request.apply_incoming()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                outcome = await self._fail(TurnFailed(exc, "persist"), request_id, builder, persisted=False)
                return outcome, None
            outcome = await self._drive(request, request_id, body, builder)
            message = await self._persist(builder)
            # A cancel arriving now (the answer is already persisted) ends here as well.
            await self._compact_between_turns()
        except asyncio.CancelledError:
            if not builder.persisted:
                builder.abort()
                # Shielded: a second cancellation must not lose the partial answer.
                await asyncio.shield(self._persist(builder))
            if _absorb_cancel(handle):
                return TurnOutcome("aborted", error_text="aborted"), builder.persisted
            raise
        return outcome, message

    async def _drive(
        self, request: _TurnRequest, request_id: str, body: Optional[dict[str, Any]], builder: AssistantMessageBuilder
    ) -> TurnOutcome:
        """Run the turn, with the error policy of DESIGN §8 around it: a context overflow is
        compacted and the turn re-run (bounded, and only while compaction shrinks the context);
        anything else that ends the turn is terminal."""
        db = self.agent.db
        overflow = self.agent.context_overflow
        continuation = request.continuation
        attempts = 0
        while True:
            turn = Turn(
                self,
                request_id=request_id,
                trigger=request.trigger,
                continuation=continuation,
                body=body,
                builder=builder,
                history=[],
            )
            try:
                if continuation:
                    last = next((m for m in reversed(await db.list_messages(self.id)) if m.role == "assistant"), None)
                    updated = await turn.run_approved_calls(last) if last is not None else None
                    if updated is not None:
                        await db.upsert_message(self.id, updated)
                turn.history = to_model_messages(await db.history(self.id))
                try:
                    outcome = await turn.run()
                except (TurnFailed, asyncio.CancelledError):
                    raise
                except Exception as exc:  # a bug must still end the turn by the failure policy
                    logger.exception("turn %s raised unexpectedly", request_id)
                    raise TurnFailed(exc, "turn") from exc
            except TurnFailed as failure:
                if not failure.classified:
                    failure.classification = await self.agent.hooks.classify_chat_error(
                        failure.error, self._error_context(request_id, failure.stage, True)
                    )
                    failure.classified = True
                if (
                    failure.classification == "context_overflow"
                    and overflow.reactive
                    and attempts < overflow.max_retries
                ):
                    attempts += 1
                    compaction = await self._compact_quietly("reactive")
                    if compaction is not None and compaction.shortened:
                        builder.reset()  # the partial of the failed attempt is discarded, never persisted
                        builder.data("think-compaction", {"reason": "reactive", "attempt": attempts})
                        continuation = False
                        continue
                return await self._fail(failure, request_id, builder, persisted=True, usage=turn.usage)
            builder.finish()
            return outcome

    def _error_context(self, request_id: str, stage: str, persisted: bool) -> ChatErrorContext:
        return ChatErrorContext(session=self, request_id=request_id, stage=stage, messages_persisted=persisted)

    # -- compaction -------------------------------------------------------------------------------
    def compact_after(self, threshold: int, token_counter: Optional[TokenCounter] = None) -> None:
        """Compact between turns whenever the history's token estimate exceeds ``threshold``."""
        self._compact_after = (threshold, token_counter)

    async def compact(self, *, token_counter: Optional[TokenCounter] = None) -> Optional[CompactionResult]:
        """Summarise the middle of the history now (non-destructive)."""
        async with self._lock:
            return await compact_session(self, reason="manual", token_counter=token_counter)

    async def _compact_quietly(self, reason: str, token_counter: Optional[TokenCounter] = None) -> Optional[CompactionResult]:
        try:
            return await compact_session(self, reason=reason, token_counter=token_counter)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("compaction (%s) of session %s failed", reason, self.id, exc_info=True)
            return None

    async def _compact_between_turns(self) -> None:
        if self._compact_after is None:
            return
        threshold, counter = self._compact_after
        count = counter or estimate_tokens
        if count(await self.agent.db.history(self.id)) > threshold:
            await self._compact_quietly("compact_after", counter)

    async def _fail(
        self,
        failure: TurnFailed,
        request_id: str,
        builder: AssistantMessageBuilder,
        *,
        persisted: bool,
        usage: Any = None,
    ) -> TurnOutcome:
        hooks = self.agent.hooks
        ctx = self._error_context(request_id, failure.stage, persisted)
        if not failure.classified:
            failure.classification = await hooks.classify_chat_error(failure.error, ctx)
            failure.classified = True
        ctx.classification = failure.classification
        replacement = await hooks.on_chat_error(failure.error, ctx)
        error = replacement if isinstance(replacement, BaseException) else failure.error
        error_text = replacement if isinstance(replacement, str) else (str(error) or type(error).__name__)
        logger.info("turn %s failed at stage %s: %s", request_id, failure.stage, error_text)
        builder.error(error_text)
        return TurnOutcome("error", error_text=error_text, usage=usage if usage is not None else Usage())

    async def _persist(self, builder: AssistantMessageBuilder) -> Optional[UIMessage]:
        if not builder.has_content():
            return None
        message = builder.message()
        await self.agent.db.upsert_message(self.id, message)
        builder.persisted = message
        return message

    # -- chat clients -----------------------------------------------------------------------------
    async def stream_transcript(
        self,
        transcript: ClientTranscript,
        *,
        body: dict[str, Any] | None = None,
        trigger: str = "transcript",
        request_id: str | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Apply a chat client's whole transcript and yield the chunks of the turn it asks for.

        Under the turn lock, before the first chunk: an edit or a regeneration deletes what it
        replaces, settled tool calls are answered, new messages are appended (see
        :mod:`think_core.transcript`). Then a turn runs for them, or the answered message is
        continued (trigger ``auto_continue``), or nothing runs when a call is still waiting.
        """
        request = _TurnRequest(trigger, None, body=body, request_id=request_id)
        request.should_apply = lambda: transcript.apply(self.agent.db, self.id, request)
        async with aclosing(self.stream_request(request)) as chunks:
            async for chunk in chunks:
                yield chunk


def _check_callback(on_event: Any) -> None:
    """``on_event`` runs on the hot path, synchronously, per chunk: a coroutine function would
    never be awaited. Use ``session.stream()`` to consume chunks asynchronously."""
    if on_event is not None and (inspect.iscoroutinefunction(on_event) or inspect.iscoroutinefunction(getattr(on_event, "__call__", None))):
        raise TypeError("on_event must be a plain function (use session.stream() for async consumption)")


def _absorb_cancel(handle: _ActiveTurn) -> bool:
    """A cancellation that ``Session.cancel`` asked for ends the turn as ``aborted`` instead of
    propagating; any other cancellation (the caller's task being cancelled) propagates."""
    if not handle.cancel_requested:
        return False
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return True
