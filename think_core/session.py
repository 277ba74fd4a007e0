"""Sessions: one conversation and the public API to it.

Every entry path (``chat``, ``stream``, ``save_messages``, ``continue_last_turn``, durable
``submit_messages``, auto-continuation after tool results, the server) builds a
:class:`~think_core.turn.loop.TurnRequest` and hands it to the session's
:class:`~think_core.runner.turn_runner.TurnRunner`, so they all fire the same hooks in the same order. The
session itself keeps the history, the submissions queue, answers to pending tool calls and the
per-plugin state.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from .chat.attachments import AttachmentLimits, checked_messages
from .chat.callbacks import ChatCallbacks, check_sync_callback, run_with_callbacks
from .chat.parts import EntryParts
from .chat.transcript import TranscriptIntake, replace_history
from .durable.intake import UNFINISHED
from .durable.queue import SubmitResult
from .events import Usage
from .messages import MessageInput, new_id, served
from .runner.failures import TurnMemory, TurnRecovery
from .runner.opening import Opening
from .runner.streams import SessionStreams
from .runner.turn_runner import TurnRunner
from .store import Submission
from .turn.compaction import CompactionResult, TokenCounter
from .turn.loop import TurnDeps
from .turn.pending_calls import approval_update, result_update
from .turn.request import TurnRequest
from .turn.ui_stream import stored_usage
from .types import SessionUsage, Trigger, TurnConfig, TurnResult, UIMessage

if TYPE_CHECKING:

    from .chat.transcript import ClientTranscript
    from .hooks.plugins import ThinkPluginManager
    from .store import AsyncStore, Store

logger = logging.getLogger("think.session")

MessagesOrFunction = MessageInput | Callable[[list[UIMessage]], Any]


class Session:
    """One conversation. Get it with ``agent.session(id)``; do not construct it directly."""

    def __init__(
        self,
        session_id: str,
        *,
        deps: TurnDeps,
        plugin_manager: ThinkPluginManager,
        settings: dict[str, Any],
        send_reasoning: bool,
        submission_lease: float,
        attachments: AttachmentLimits,
        on_open: Callable[[Session], object] | None = None,
    ) -> None:
        self.id = session_id
        self._on_open = on_open
        self.settings = settings
        self.state: dict[str, Any] = {}
        self._plugin_state: dict[str, dict[str, Any]] = {}
        self._plugin_manager = plugin_manager
        self._db: AsyncStore = deps.db
        self._hooks = deps.hooks
        self._opening = Opening(self._open_once)
        self._memory = TurnMemory()
        self._recovery = TurnRecovery(self, deps, self._memory)
        #: The session's resumable streams: what a client joining late replays and follows.
        self.streams = SessionStreams(session_id, self._db)
        self._runner = TurnRunner(self, self._recovery, open=self.open, send_reasoning=send_reasoning)
        self._attachments = attachments
        self._background: set[asyncio.Task[Any]] = set()
        self._parts = EntryParts(session_id, self._db, self._runner, self.streams, tools=deps.tools,
                                 attachments=attachments, lease=submission_lease, spawn=self._spawn)

    @property
    def compaction_events(self) -> list[CompactionResult]:
        """The compactions this session made in this process, oldest first."""
        return self._memory.compactions

    @property
    def last_input_tokens(self) -> int:
        """Input tokens of the latest model step (what the proactive overflow guard compares)."""
        return self._memory.last_input_tokens

    def __repr__(self) -> str:
        return f"<Session {self.id!r}>"

    # -- plugin state -------------------------------------------------------------------------
    def state_for(self, plugin: Any) -> dict[str, Any]:
        """A dict private to ``plugin`` in this session, so plugin singletons stay session-safe."""
        key = plugin if isinstance(plugin, str) else (self._plugin_manager.get_name(plugin) or str(id(plugin)))
        return self._plugin_state.setdefault(key, {})

    # -- opening ----------------------------------------------------------------------------------
    async def open(self) -> Session:
        """Fire ``configure_session`` (once per process) and start recovering durable submissions.
        Every entry path awaits this; call it yourself to surface plugin errors early."""
        await self._opening()
        return self

    async def _open_once(self) -> None:
        session_id = self.id

        def opening(store: Store) -> tuple[bool, bool, Any]:
            # One round trip: the session's row, whether anything of it is unfinished (to
            # recover), and the body its last turn ran with (a continuation's default). A
            # session this made holds neither.
            if store.ensure_session(session_id) is True:
                return True, False, None
            unfinished = bool(store.list_submissions(session_id, status=UNFINISHED, limit=1))
            return False, unfinished, store.get_state(session_id, "last_body")

        created, unfinished, last_body = await self._db.atomic(opening, session_id=session_id, brief=True)
        if created:
            self._db.model_history.made_empty(session_id)
        self._runner.note_last_body(last_body)
        await self._hooks.configure_session(self)
        if unfinished:
            await self._parts.submissions.recover(unfinished)
        if self._on_open is not None:
            self._on_open(self)

    @property
    def is_open(self) -> bool:
        """Whether the session was opened in this process (its submissions are watched)."""
        return self._opening.done

    def resume_submissions(self) -> None:
        """Start draining the session's unfinished submissions (a no-op while a drain runs)."""
        self._parts.submissions.kick()

    async def submissions_drained(self) -> None:
        """Wait until the session's drain (if one runs) has nothing left to do."""
        await self._parts.submissions.drained()

    # -- history ------------------------------------------------------------------------------------
    async def messages(self) -> list[UIMessage]:
        """The persisted UI messages, oldest first, as clients see them (reasoning kept from the
        stream by ``send_reasoning=False`` is left out; ``history()`` is what the model sees)."""
        return [served(m) for m in await self._db.list_messages(self.id)]

    async def history(self) -> list[UIMessage]:
        """The messages as the model sees them: compacted ranges replaced by their summary."""
        return await self._db.history(self.id)

    async def usage(self) -> SessionUsage:
        """What this session's turns used, by model id, read from the stored answers (see
        :class:`~think_core.types.SessionUsage`): a whole-session read, for a budget's check."""
        by_model: dict[str, Usage] = {}
        for message in await self._db.list_messages(self.id):
            for model_id, used in stored_usage(message.metadata).items():
                by_model[model_id] = by_model.get(model_id, Usage()) + used
        return SessionUsage(by_model=by_model)

    async def replace_messages(self, messages: MessageInput, *, from_client: bool = False) -> list[UIMessage]:
        """Make the history equal ``messages``, after the turns queued before; returns the stored
        history. ``from_client``: the whole transcript of a chat client (its ``setMessages``),
        which may keep, trim, clear and edit its user messages but not write the assistant's:
        anything else raises :class:`~think_core.errors.ClientRequestRefused` and changes nothing
        (see :mod:`think_core.chat.authority`)."""
        self._assert_not_nested("replace_messages")
        async with self._runner.lock:
            await replace_history(self._db, self.id, checked_messages(messages, self._attachments), from_client=from_client)
            return [served(m) for m in await self._db.list_messages(self.id)]

    async def add_messages(self, messages: MessagesOrFunction) -> list[UIMessage]:
        """Append messages to the history without running a turn (allowed inside a turn)."""
        await self.open()
        resolved: Any = messages
        if callable(messages):
            resolved = messages(await self._db.list_messages(self.id))
            if asyncio.iscoroutine(resolved):
                resolved = await resolved
        return await self._db.append_messages(self.id, checked_messages(resolved, self._attachments))

    # -- entry paths --------------------------------------------------------------------------------
    async def chat(
        self,
        input: MessageInput,
        *,
        body: dict[str, Any] | None = None,
        on_event: Callable[[dict[str, Any]], Any] | None = None,
        request_id: str | None = None,
        on_start: Callable[[str], Any] | None = None,
        on_done: Callable[[TurnResult], Any] | None = None,
        on_error: Callable[[Any], Any] | None = None,
        config: TurnConfig | None = None,
    ) -> TurnResult:
        """Run a turn for ``input`` (a string, a UI message or a list) and return its result.

        ``config`` sets this turn's settings (``TurnConfig(temperature=0, system=...)``) over the
        agent's defaults; a plugin's ``before_turn`` answer still overrides it.

        The callbacks are those of Think's sub-agent ``chat()``, each a plain or an async
        function: ``on_start(request_id)`` before the turn, ``on_event(chunk)`` per UI message
        stream chunk, ``on_done(result)`` once it completed, ``on_error(error)`` once it failed
        (the error text, or the exception the call then does not raise). See
        :mod:`think_core.chat.callbacks`."""
        request = TurnRequest(
            "chat", checked_messages(input, self._attachments), body=body, request_id=request_id or new_id("req"), config=config
        )
        callbacks = ChatCallbacks(on_start, on_event, on_done, on_error)
        if callbacks.plain():
            request.emit = on_event
            return await self._runner.run(request)
        return await run_with_callbacks(self._runner.run, request, callbacks)

    async def save_messages(
        self, messages: MessagesOrFunction, *, body: dict[str, Any] | None = None
    ) -> TurnResult:
        """Append ``messages`` (or ``fn(history) -> messages``, resolved under the turn lock), then run a turn."""
        incoming = messages if callable(messages) else checked_messages(messages, self._attachments)
        return await self._runner.run(TurnRequest("save_messages", incoming, body=body))

    async def continue_last_turn(self, *, body: dict[str, Any] | None = None) -> TurnResult:
        """Run a continuation of the last assistant message (``continuation=True``).
        Skipped when the last message is not the assistant's."""
        self._assert_not_nested("continue_last_turn")
        history = await self._db.list_messages(self.id)
        if not history or history[-1].role != "assistant":
            return TurnResult(request_id="", status="skipped", continuation=True)
        return await self._runner.run(TurnRequest("continue", None, continuation=True, body=body))

    async def stream(
        self,
        input: MessageInput,
        *,
        body: dict[str, Any] | None = None,
        trigger: Trigger = "stream",
        request_id: str | None = None,
        config: TurnConfig | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Run a turn and yield its AI SDK UI message stream chunks as they are produced
        (``config`` as for :meth:`chat`)."""
        request = TurnRequest(
            trigger, checked_messages(input, self._attachments), body=body, request_id=request_id or new_id("req"), config=config
        )
        # aclosing: closing this stream early aborts the turn now, not when the GC gets to it.
        async with aclosing(self.stream_request(request)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def stream_request(
        self, request: TurnRequest, *, stop_on_close: bool = True
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Run ``request`` in a task of its own and yield its chunks (used by the server too).
        Closing the stream before the end cancels the turn; with ``stop_on_close=False`` the
        turn runs on to its end and is stored (nobody follows it here any more)."""
        self._assert_not_nested(request.trigger)
        async with aclosing(self._runner.stream(request, stop_on_close=stop_on_close, adopt=self._adopt)) as chunks:
            async for chunk in chunks:
                yield chunk

    def _adopt(self, task: asyncio.Task[Any]) -> None:
        """Keep a turn nobody follows any more until it ends (``aclose`` still cancels it)."""
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- durable submissions -----------------------------------------------------------------------
    async def submit_messages(
        self,
        messages: MessageInput,
        *,
        submission_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SubmitResult:
        """Accept ``messages`` durably and return at once; a background drain runs them as a
        turn (trigger ``submit``), FIFO. The same ``idempotency_key`` (or ``submission_id``)
        returns the existing submission with ``accepted=False``. Allowed inside a turn."""
        await self.open()
        return await self._parts.submissions.submit(
            checked_messages(messages, self._attachments), submission_id=submission_id, idempotency_key=idempotency_key, metadata=metadata
        )

    async def inspect_submission(self, submission_id: str) -> Submission | None:
        return await self._db.get_submission(self.id, submission_id)

    async def list_submissions(self, *, status: str | None = None, limit: int | None = None) -> list[Submission]:
        return await self._db.list_submissions(self.id, status=status, limit=limit)

    async def cancel_submission(self, submission_id: str) -> bool:
        return await self._parts.submissions.cancel(submission_id)

    async def wait_for_submission(self, submission_id: str, *, timeout: float | None = None) -> Submission:
        """Wait until the submission is ``completed``, ``error``, ``aborted`` or ``skipped``."""
        await self.open()
        return await self._parts.submissions.wait(submission_id, timeout)

    # -- client tools and approvals -------------------------------------------------------------
    async def add_tool_result(
        self,
        tool_call_id: str,
        output: Any = None,
        *,
        error: str | None = None,
        auto_continue: bool = True,
        on_event: Callable[[dict[str, Any]], Any] | None = None,
        request_id: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> TurnResult | None:
        """Settle a pending client tool call with ``output`` (or ``error``). When every pending
        call of that assistant message is settled and ``auto_continue`` is set, an
        auto-continuation turn runs and its result is returned."""
        check_sync_callback(on_event)
        await self.open()
        settle = result_update(tool_call_id, output, error)
        return await self._parts.answers.settle(tool_call_id, settle, auto_continue, on_event, request_id, body)

    async def approve_tool_call(
        self,
        tool_call_id: str,
        approved: bool,
        *,
        reason: str | None = None,
        auto_continue: bool = True,
        on_event: Callable[[dict[str, Any]], Any] | None = None,
        request_id: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> TurnResult | None:
        """Answer an approval request. An approved call runs inside the continuation it starts
        (``body``: that turn's body; ``None`` reuses the last turn's): its ``before_turn``, then
        ``before_step``, then ``before_tool_call`` (which still has the final say), execution,
        ``after_tool_call`` and the model step. A denied one is answered with an error."""
        check_sync_callback(on_event)
        await self.open()
        settle = approval_update(tool_call_id, approved, reason)
        return await self._parts.answers.settle(tool_call_id, settle, auto_continue, on_event, request_id, body)

    def _spawn(self, coro: Any) -> None:
        """Run ``coro`` in the background, outside any turn's context, tracked for ``aclose``."""
        self._adopt(asyncio.get_running_loop().create_task(coro, context=contextvars.Context()))

    async def clear(self) -> None:
        """Cancel running and queued turns, wait for them to record their partial answers, then
        delete the history (so nothing written by a cancelled turn reappears afterwards).
        Durable submissions still pending are marked ``skipped``: they belonged to the
        conversation that was cleared."""
        self._assert_not_nested("clear")
        # Skip first, so the drain cannot claim a pending one as the running one is cancelled.
        await self._parts.submissions.skip_pending("skipped: the conversation was cleared")
        self.cancel_all()
        async with self._runner.lock:
            await self._db.clear_messages(self.id)

    async def aclose(self) -> None:
        """Stop this session's background work (pending submissions stay in the store)."""
        if self._parts.made_submissions:
            await self._parts.submissions.aclose()
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # -- cancellation -----------------------------------------------------------------------------
    async def report_unparsed(
        self, error: BaseException, request_id: str | None = None, body: dict[str, Any] | None = None
    ) -> str:
        """A chat request for this session that could not be parsed (a transport calls this: no
        turn exists): ``classify_chat_error`` and ``on_chat_error`` with ``stage="parse"``, one
        ``chat:request:failed`` record. Returns the error text to send the client."""
        await self.open()
        return await self._runner.recovery.report_unparsed(error, request_id or new_id("req"), body)

    async def stop(self) -> list[str]:
        """Stop the answer being written now — a chat client's stop button: its turn is
        cancelled and its partial answer stored, marked ``metadata["stopped"]``. With no turn
        streaming yet, the first chat still waiting for its turn is stopped instead. Chats
        queued behind it still run. Returns the ids of the turns (submissions) stopped."""
        return await self._parts.stop.press()

    def cancel(self, request_id: str) -> bool:
        """Abort a running or queued turn: its partial message is persisted, status ``aborted``."""
        return self._runner.cancel(request_id)

    def cancel_all(self) -> int:
        """Abort every running and queued turn of this session; returns how many."""
        return self._runner.cancel_all()

    @property
    def active_request_ids(self) -> list[str]:
        return list(self._runner.active)

    def _assert_not_nested(self, what: str) -> None:
        self._runner.assert_not_nested(what)

    # -- compaction -------------------------------------------------------------------------------
    def compact_after(self, threshold: int, token_counter: TokenCounter | None = None) -> None:
        """Compact between turns whenever the history's token estimate exceeds ``threshold``."""
        self._memory.compact_after = (threshold, token_counter)

    async def compact(self, *, token_counter: TokenCounter | None = None) -> CompactionResult | None:
        """Summarise the middle of the history now (non-destructive)."""
        async with self._runner.lock:
            return await self._recovery.compact("manual", token_counter)

    # -- chat clients -----------------------------------------------------------------------------
    async def stream_transcript(
        self,
        transcript: ClientTranscript,
        *,
        body: dict[str, Any] | None = None,
        trigger: Trigger = "chat",
        request_id: str | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Apply a chat client's whole transcript and yield the chunks of the turn it asks for.

        A request that adds a user message, one that answers every call an answer left waiting,
        an edit and a regeneration each run as a durable submission (see
        :mod:`think_core.chat.submissions`). Any other is applied under the turn lock, before the
        first chunk (see :mod:`think_core.chat.transcript`): answers that leave a call waiting are
        recorded and nothing runs; new messages that come with answers are appended and answered.
        """
        self._assert_not_nested(trigger)
        await self.open()
        sid = request_id or new_id("req")
        source = await self._parts.chats.source(transcript, body, trigger, sid)
        if source is None:
            request = TurnRequest(
                trigger, None, body=body, request_id=request_id, resumable=True, intake=TranscriptIntake(transcript)
            )
            source = self.stream_request(request, stop_on_close=transcript.stop_on_close)
        async with aclosing(source) as chunks:
            async for chunk in chunks:
                yield chunk


