"""The turn runner of one session: one turn at a time, in arrival order.

It holds the session's turn lock (FIFO; across processes when the store shares sessions), keeps the registry of active turns that
``cancel(request_id)`` works on, persists the turn's input before it runs and its assistant
message after it — the partial one too, on error or cancel — and fires ``on_chat_response``
once the lock is released (so a hook may start the next turn of the same session).

A request's intake stores its answer: for a durable submission the message and the
submission's completion are one transaction, and ``on_chat_response``
fires after that commit — so a crash after it never produces a second answer, and one during
the hook means the hook does not run again (at most once for that turn).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..errors import NestedTurnError, StoreUnavailable
from ..messages import new_id, origin_message_ids, served
from ..turn.request import TurnFailed, TurnOutcome, TurnRequest
from ..turn.ui_replay import replay_chunks
from ..turn.ui_stream import AssistantMessageBuilder
from ..types import ChatResponseResult, TurnConfig, TurnResult, UIMessage
from .failures import TurnRecovery
from .lock import TurnLock
from .streams import LiveStream

logger = logging.getLogger("think.runner")

# The runner whose turn the current task is running (tools and hooks run in that context).
_TURN_OWNER: contextvars.ContextVar[TurnRunner | None] = contextvars.ContextVar("think_turn_owner", default=None)


@dataclass
class ActiveTurn:
    request_id: str
    task: asyncio.Task[Any] | None = None
    cancel_requested: bool = False
    body: dict[str, Any] | None = None
    answer_refused: bool = False  # the store would not take the answer: the turn is not ours any more


#: ``TurnRunner._last_body`` before this process has read or written it.
_UNREAD: Any = object()


class TurnRunner:
    """Runs :class:`~think_core.turn.loop.TurnRequest` s of one session.

    :param open: opens the session (``configure_session``, recovery); awaited before each turn.
    """

    def __init__(
        self,
        session: Any,
        recovery: TurnRecovery,
        *,
        open: Callable[[], Awaitable[Any]],
        send_reasoning: bool,
    ) -> None:
        self.session = session
        self.recovery = recovery
        self.db = recovery.deps.db
        self.hooks = recovery.deps.hooks
        self._open = open
        self._send_reasoning = send_reasoning
        self.lock = TurnLock(self.db, session.id)
        self.active: dict[str, ActiveTurn] = {}
        # The config of the call that started the session's latest answer (see _turn_config).
        self._answer_config: TurnConfig | None = None
        # The stored ``last_body`` as this process last wrote or read it (see _turn_body).
        self._last_body: Any = _UNREAD

    def note_last_body(self, body: Any) -> None:
        """The stored ``last_body`` as the session's opening read it (see ``_turn_body``)."""
        if self._last_body is _UNREAD:
            self._last_body = body

    # -- nesting ------------------------------------------------------------------------------
    def in_turn(self) -> bool:
        """Whether the current task runs inside a turn of this session (the lock is ours)."""
        return _TURN_OWNER.get() is self

    def assert_not_nested(self, what: str) -> None:
        if self.in_turn():
            raise NestedTurnError(
                f"{what}() was called from inside an active turn of session {self.session.id!r}; "
                "this would wait for itself. Use submit_messages() or add_messages() instead."
            )

    # -- cancellation -------------------------------------------------------------------------
    def cancel(self, request_id: str) -> bool:
        """Abort a running or queued turn: its partial message is persisted, status ``aborted``."""
        handle = self.active.get(request_id)
        if handle is None or handle.cancel_requested:
            return False
        handle.cancel_requested = True
        if handle.task is not None and not handle.task.done():
            handle.task.cancel()
        return True

    def cancel_all(self) -> int:
        return sum(self.cancel(rid) for rid in list(self.active))

    # -- running ------------------------------------------------------------------------------
    async def stream(
        self, request: TurnRequest, *, stop_on_close: bool, adopt: Callable[[asyncio.Task[Any]], None]
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Run ``request`` in a task of its own and yield its chunks. Closing the stream before
        the end cancels the turn; with ``stop_on_close=False`` the turn runs on, unfollowed,
        handed to ``adopt`` so that something still holds (and can cancel) it."""
        request_id = request.request_id = request.request_id or new_id("req")
        queue: asyncio.Queue[Any] = asyncio.Queue()
        done = object()
        followed = True

        def emit(chunk: dict[str, Any]) -> None:
            if followed:
                queue.put_nowait(chunk)

        request.emit = emit
        task = asyncio.create_task(self.run(request))
        task.add_done_callback(lambda _: queue.put_nowait(done))
        try:
            while True:
                item = await queue.get()
                if item is done:
                    break
                yield item
            await task
        finally:
            if not task.done() and not stop_on_close:
                followed = False
                adopt(task)
                task.add_done_callback(_retrieve)
            elif not task.done():
                self.cancel(request_id)
                await asyncio.wait([task])
            if task.done() and not task.cancelled():
                task.exception()  # retrieved; a failure was already raised above or is moot

    async def run(self, request: TurnRequest) -> TurnResult:
        self.assert_not_nested(request.trigger)
        await self._open()
        request_id = request.request_id or new_id("req")
        handle = ActiveTurn(request_id, asyncio.current_task())
        self.active[request_id] = handle
        sink = _StreamSink(request.emit) if request.resumable else None
        builder = AssistantMessageBuilder(new_id(), sink or request.emit, send_reasoning=self._send_reasoning)
        outcome: TurnOutcome | None = None
        persisted: UIMessage | None = None
        # The turn stays active (cancellable) until on_chat_response has returned.
        try:
            try:
                await self.lock.acquire()
            except asyncio.CancelledError:
                if _absorb_cancel(handle):
                    return TurnResult(request_id=request_id, status="aborted", continuation=request.continuation)
                raise
            token = _TURN_OWNER.set(self)
            try:
                outcome, persisted = await self._locked_turn(request, request_id, handle, builder, sink)
            finally:
                _TURN_OWNER.reset(token)
                await self.lock.release()
            if outcome is None:  # skipped before running
                return TurnResult(request_id=request_id, status="skipped", continuation=request.continuation)
            return await self._respond(
                request, request_id, handle, outcome, persisted, builder.message(), builder.continued_parts
            )
        finally:
            self.active.pop(request_id, None)
            if sink is not None and sink.live is not None:
                # After the answer is stored: a late joiner finds the turn streaming or stored.
                await asyncio.shield(self.session.streams.end(sink.live, outcome.status if outcome else "aborted"))

    async def _respond(
        self,
        request: TurnRequest,
        request_id: str,
        handle: ActiveTurn,
        outcome: TurnOutcome,
        persisted: UIMessage | None,
        built: UIMessage,
        continued_parts: int,
    ) -> TurnResult:
        """``on_chat_response`` (the lock is released), then the entry path's result. A cancel
        while the hook runs stops the hook; the turn's answer is already persisted and stands.
        The hook gets the stored answer only (``None`` when the turn stored none); the entry
        path's result keeps the message as built."""
        fields: dict[str, Any] = dict(
            request_id=request_id,
            status=outcome.status,
            continuation=request.continuation,
            error=outcome.error_text,
            output=outcome.output,
            usage=outcome.usage,
            # Counted as served (the same rule as the message): hidden reasoning is not handed out.
            continued_parts=len(served(built.model_copy(update={"parts": built.parts[:continued_parts]})).parts),
        )
        # What a hook or a caller receives is what a client is served: reasoning a turn kept
        # hidden (``send_reasoning=False``) is stored for the model only, never handed out.
        built = served(built)
        persisted = served(persisted) if persisted is not None else None
        if handle.answer_refused:
            logger.warning("turn %s lost its submission to another owner; its answer was dropped", request_id)
            return TurnResult(message=built, **fields)
        if not self.hooks.implements("on_chat_response"):
            return TurnResult(message=persisted or built, **fields)
        try:
            await self.hooks.on_chat_response(
                ChatResponseResult(session=self.session, body=handle.body, message=persisted, **fields)
            )
        except asyncio.CancelledError:
            if not _absorb_cancel(handle):
                raise
            logger.warning("turn %s was cancelled while on_chat_response ran; the hook was stopped", request_id)
        return TurnResult(message=persisted or built, **fields)

    async def _locked_turn(
        self, request: TurnRequest, request_id: str, handle: ActiveTurn, builder: AssistantMessageBuilder,
        sink: _StreamSink | None,
    ) -> tuple[TurnOutcome | None, UIMessage | None]:
        try:
            if not await request.intake.admit(self.db, self.session.id, request):
                return None, None
        except asyncio.CancelledError:
            if _absorb_cancel(handle):
                return TurnOutcome("aborted", error_text="aborted"), None
            raise
        body = handle.body = await self._turn_body(request)
        request.config = self._turn_config(request)
        live = await self._begin(request, request_id, builder, sink)
        try:
            try:
                # The stream is opened in the transaction writing the input, where the intake has one.
                await request.intake.write(self.db, self.session.id, request, [live.opening] if live and live.opening else [])
            except (asyncio.CancelledError, StoreUnavailable):
                raise
            except Exception as exc:
                failure = TurnFailed(exc, "persist")
                if live is not None:
                    await live.opened()
                return await self.recovery.fail(failure, request_id, builder, persisted=False, body=body), None
            if live is not None:
                await live.opened()
            await self._continued_message(sink, builder.message_id)
            outcome = await self.recovery.run_with_overflow_recovery(
                request, request_id, body, builder, save_partial=lambda: self._save_partial(request, builder)
            )
            message = await self._persist(request, handle, builder, outcome, sink)
            # A cancel arriving now (the answer is already persisted) ends here as well.
            await self.recovery.compact_between_turns()
        except asyncio.CancelledError:
            aborted = TurnOutcome("aborted", error_text="aborted")
            if not builder.persisted:
                builder.abort()
                # Shielded: a second cancellation must not lose the partial answer.
                await asyncio.shield(self._persist(request, handle, builder, aborted, sink))
            if _absorb_cancel(handle):
                return aborted, builder.persisted
            raise
        return outcome, message

    async def _begin(
        self, request: TurnRequest, request_id: str, builder: AssistantMessageBuilder, sink: _StreamSink | None
    ) -> LiveStream | None:
        """The answer's start: what an interrupted run of the turn journaled (restored), the
        message a continuation continues, and the turn's resumable stream (begun, not opened
        in the store yet: the input's transaction does that)."""
        replay = await request.journal.load()
        if replay.message_id is not None:  # resumed after a crash: the same answer, so far
            builder.restore(replay.message_id, replay.parts)
        elif request.continuation:
            await self._continue_message(builder)
        if sink is not None:
            replayed = request.journal.stream_start(builder.message)
            sink.live = self.session.streams.begin(
                request_id, continuation=request.continuation, message_ids=_message_ids(request), replayed=replayed
            )
        builder.start()
        return sink.live if sink is not None else None

    async def _continue_message(self, builder: AssistantMessageBuilder) -> None:
        """A continuation extends the last assistant message, the way chat clients show it: one
        answer, not two. Its ``start`` names that message; the turn takes up its parts (after
        running its approved calls, see ``TurnRecovery``) and stores the whole of it."""
        history = await self.db.list_messages(self.session.id)
        if history and history[-1].role == "assistant":
            builder.continue_message(history[-1].id)

    async def _continued_message(self, sink: _StreamSink | None, message_id: str) -> None:
        """The message a continuation continues, as stored with its answers applied, for the
        clients that resume its stream (see ``LiveStream.replay_prefix``)."""
        live = sink.live if sink is not None else None
        if live is None or not live.awaits_prefix:  # not a continuation, or restored after a crash
            return
        message = await self.db.get_message(self.session.id, message_id)
        if message is None or message.role != "assistant" or _resumed_on_top(message):
            live.continues([])
            return
        live.continues([c for c in replay_chunks(message) if c.get("type") != "finish"])

    async def _turn_body(self, request: TurnRequest) -> dict[str, Any] | None:
        """A continuation without a body of its own reuses the body of the turn it continues:
        the latest turn that was not a continuation (a turn without a body clears it, so an
        earlier turn's ``read_only`` does not leak into a later answer's approval)."""
        session_id = self.session.id
        if request.body is None and request.continuation:
            body: dict[str, Any] | None = await self.db.get_state(session_id, "last_body")
            self._last_body = body
            return body
        # A body-less turn after one with a body writes the clearing ``None``; a turn with the
        # body the last one had (known here, or read once per process) writes nothing: a chat
        # client sends the same body with every message.
        if request.body is None and self._last_body is _UNREAD:
            self._last_body = await self.db.get_state(session_id, "last_body")
        if request.body != self._last_body:
            await self.db.set_state(session_id, "last_body", request.body)
        self._last_body = request.body
        return request.body

    def _turn_config(self, request: TurnRequest) -> TurnConfig | None:
        """A continuation (an approval's, a client tool result's, ``continue_last_turn``) extends
        the answer of the call that started it, so it runs with that call's ``config``; any other
        turn starts a new answer with its own (``None`` included). Its ``messages`` are not
        carried: they replaced the call's first request, and a continuation sends the answer so
        far. Kept in memory with the session, not stored: a config is the caller's Python object
        (tools, a model, an output class), so a continuation in another process or after a
        restart has the agent's defaults."""
        if not request.continuation:
            config = request.config
            carried = config.model_copy(update={"messages": None}) if config and config.messages else config
            self._answer_config = carried
        elif request.config is None:
            return self._answer_config
        return request.config

    async def _persist(
        self, request: TurnRequest, handle: ActiveTurn, builder: AssistantMessageBuilder, outcome: TurnOutcome,
        sink: _StreamSink | None,
    ) -> UIMessage | None:
        message = builder.message() if builder.has_content() else None
        # The stream's end goes with the answer where the intake stores it in a transaction.
        closing = [sink.live.ending(outcome.status)] if sink is not None and sink.live is not None else []
        if not await request.intake.store_answer(
            self.db, self.session.id, message, outcome.status, outcome.error_text, closing
        ):
            handle.answer_refused = True
            return None
        if message is None:
            if builder.error_text is not None:
                await self._note_error(builder.error_text, request.answers)
            return None
        builder.mark_persisted(message)
        return message

    async def _save_partial(self, request: TurnRequest, builder: AssistantMessageBuilder) -> None:
        """The failed turn's answer so far, stored before ``on_chat_error``. A plain upsert even
        for a durable submission: its answer and completion are still stored together after the
        hook (the same message id, so this one is overwritten, never doubled)."""
        if builder.has_content():
            await self.db.upsert_message(self.session.id, builder.message())
        elif builder.error_text is not None:
            await self._note_error(builder.error_text, request.answers)

    async def _note_error(self, error_text: str, answers: str | None) -> None:
        """A turn that failed before any output leaves no answer; its error goes into the
        ``metadata["error"]`` of the message it answered, so that the failure (a bad key, an
        unknown model, a provider that is down) is still in the conversation after a reload."""
        messages = await self.db.list_messages(self.session.id)
        answered = [m for m in messages if m.id == answers] if answers is not None else messages[-1:]
        if answered:
            last = answered[-1]
            await self.db.upsert_message(self.session.id, last.model_copy(update={"metadata": {**(last.metadata or {}), "error": error_text}}))


class _StreamSink:
    """The chunk callback of a resumable turn: each chunk goes to the turn's stream log (once it
    has begun) and to the entry path's own ``emit``."""

    __slots__ = ("forward", "live")

    def __init__(self, forward: Any) -> None:
        self.forward = forward
        self.live: LiveStream | None = None

    def __call__(self, chunk: dict[str, Any]) -> None:
        if self.live is not None:
            self.live.append(chunk)
        if self.forward is not None:
            self.forward(chunk)


def _resumed_on_top(message: UIMessage) -> bool:
    """Whether clients resume a stream on top of ``message`` rather than rebuilding it: the AI
    SDK (5–7) keeps the answer it holds when a tool call in it is still being answered — an
    approval responded to, input still streaming, a provider-run call without its output — and
    rebuilds it from the resumed stream otherwise (a client tool's answered call included)."""
    for part in message.parts:
        state = part.get("state")
        if "toolCallId" in part and (
            state in ("approval-responded", "input-streaming") or (state == "input-available" and part.get("providerExecuted"))
        ):
            return True
    return False


def _message_ids(request: TurnRequest) -> list[str] | None:
    """The user messages the turn answers (see ``TurnRequest.message_ids``)."""
    if request.message_ids is not None:
        return request.message_ids
    if isinstance(request.incoming, list):
        ids = origin_message_ids(request.incoming)
        if ids:
            return ids
    return [request.answers] if request.answers is not None else None


def _absorb_cancel(handle: ActiveTurn) -> bool:
    """A cancellation that ``cancel()`` asked for ends the turn as ``aborted`` instead of
    propagating; any other cancellation (the caller's task being cancelled) propagates."""
    if not handle.cancel_requested:
        return False
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return True


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Retrieve the outcome of a turn nobody awaits any more (its failure was stored)."""
    if not task.cancelled():
        task.exception()
