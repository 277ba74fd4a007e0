"""Server chats as durable submissions.

A chat client's request that only adds a user message (the common case: ``useChat``'s
``sendMessage``, a ``cf_agent_use_chat_request``) is accepted as a durable submission before
its turn starts, keyed by that message's id, and the client follows the turn the drain runs
for it. So a chat survives a crash like any submission, and the same message sent again — a
retry, a reload, a client that reconnects — follows the same turn or gets its stored answer
replayed, never a second answer.

A request that only answers the pending tool calls of the last assistant message — a client
tool's result, a human's approval — and leaves none of them waiting is a durable submission
too: a continuation, keyed by that message and the calls it answers. The answers are applied
by the drain under the turn lock, and an approved call runs in the continuation's journal, so a
crash neither loses the continuation nor runs a non-idempotent approved call twice.

An edit of an earlier user message and a regeneration of an answer are durable submissions as
well: the messages they replace are deleted in the transaction that appends the (edited) user
message, before their turn, so a crash never leaves the history cut without its new answer.
The same edit or regeneration sent again (by ``messageId``) follows or replays that submission.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..durable.crash_recovery import REPLACING_KEY
from ..durable.intake import ANSWERS_KEY
from ..durable.queue import BODY_KEY, TRIGGER_KEY, SubmissionQueue
from ..messages import is_tool_part
from ..store import MessageWindow, Submission
from ..turn.pending_calls import WAITING_STATES, ToolAnswer
from ..turn.ui_replay import replay_chunks
from ..types import Trigger, UIMessage
from .authority import REGENERATE
from .transcript import (
    CONTINUE_TRIGGER,
    SUBMIT,
    ClientTranscript,
    Reconciliation,
    message_with_tool_call,
    reconcile,
    request_window,
)

if TYPE_CHECKING:
    from ..store import AsyncStore

__all__ = [
    "ChatSubmissions",
    "TranscriptGuard",
    "DurableChat",
    "DurableContinuation",
    "DurableRewrite",
    "durable_chat",
    "durable_continuation",
    "durable_rewrite",
]


@dataclass(frozen=True)
class DurableChat:
    """A chat request that only adds a user ``message``: it runs as a durable submission, keyed
    by that message's id (``key``). ``append`` are the request's messages not stored yet (empty
    when the client sends a message again); ``answer`` is the id of the stored assistant message
    right after the keyed one, if there is one (it was answered already)."""

    message: UIMessage
    append: list[UIMessage]
    answer: str | None = None

    @property
    def key(self) -> str:
        return self.message.id


def durable_chat(
    window: MessageWindow, transcript: ClientTranscript, plan: Reconciliation | None = None
) -> DurableChat | None:
    """The durable form of a chat request, or ``None`` when it does more than add a user
    message: a regeneration, an edit (it cuts the history), tool answers, a continuation.
    ``window``: the stored history the request needs (see
    :func:`~think_core.chat.transcript.request_window`); ``plan``: the request reconciled with it
    already (see :func:`reconcile_transcript`)."""
    if transcript.trigger != SUBMIT or transcript.answers or not transcript.messages:
        return None
    last = transcript.messages[-1]
    if last.role != "user":
        return None
    stored = window.messages
    ids = [m.id for m in stored]
    message_id = transcript.message_id
    if message_id == last.id and last.id in ids and stored[ids.index(last.id)].parts == last.parts:
        message_id = None  # "editing" a message into what it already says: the same message, sent again
    if plan is None or message_id != transcript.message_id:
        plan = reconcile(stored, transcript.messages, transcript.trigger, message_id, waiting=window.waiting)
    if plan.cut or plan.answers or plan.continuation:
        return None
    after = ids.index(last.id) + 1 if last.id in ids else len(ids)
    answer = stored[after].id if after < len(stored) and stored[after].role == "assistant" else None
    return DurableChat(last, plan.append, answer)



@dataclass(frozen=True)
class DurableContinuation:
    """A chat request that answers every call the last assistant ``message`` left waiting, and
    so continues it: a durable submission keyed by the message and the calls it answers."""

    message: UIMessage
    answers: list[ToolAnswer]

    @property
    def key(self) -> str:
        return continuation_key(self.message.id, [a.tool_call_id for a in self.answers])

    def answered_message(self) -> UIMessage:
        """The message as it reads once the drain has applied the answers (what other tabs are
        told before the continuation's first chunk)."""
        parts = [dict(p) for p in self.message.parts]
        by_id = {p.get("toolCallId"): p for p in parts if is_tool_part(p)}
        for answer in self.answers:
            part = by_id.get(answer.tool_call_id)
            if part is not None and part.get("state") in WAITING_STATES:
                try:
                    answer.settle()(part)
                except ValueError:
                    pass  # the drain reports it: this answer does not fit the call
        return self.message.model_copy(update={"parts": parts})


def continuation_key(message_id: str, call_ids: Sequence[str]) -> str:
    return f"continue:{message_id}:{','.join(sorted(call_ids))}"


def durable_continuation(
    window: MessageWindow, transcript: ClientTranscript, plan: Reconciliation | None = None
) -> DurableContinuation | None:
    """The durable form of a request that only answers tool calls, or ``None``: it does more
    (a new message comes with the answers), or it leaves a call waiting (nothing runs yet), or
    it answers a message that is not the last one."""
    stored = window.messages
    if transcript.trigger != SUBMIT or not transcript.auto_continue or not stored:
        return None
    plan = plan or reconcile_transcript(window, transcript)
    if not plan.continuation:
        return None
    message = message_with_tool_call(stored, plan.answers[-1].tool_call_id)
    if message is None or message.id != stored[-1].id:
        return None
    answered = {a.tool_call_id for a in plan.answers}
    waiting = {p.get("toolCallId") for p in message.parts if is_tool_part(p) and p.get("state") in WAITING_STATES}
    if not waiting <= answered:
        return None
    return DurableContinuation(message, list(plan.answers))


@dataclass(frozen=True)
class DurableRewrite:
    """A chat request that replaces part of the history and is answered in one turn: an edit
    (``message`` is the edited user message) or a regeneration (``message`` is the user message
    whose answer is redone). ``replacing_from``: the stored message deleted with everything
    after it — worked out again when the submission is applied, under the turn lock, so a turn
    still running when it was sent is replaced with the rest."""

    message: UIMessage
    replacing_from: str
    key: str
    edit: bool


def rewrite_key(trigger: str, message_id: str, message: UIMessage | None = None) -> str:
    """A regeneration is keyed by the answer it redoes; an edit by the message and its new text."""
    if trigger == REGENERATE:
        return f"regenerate:{message_id}"
    parts = json.dumps(message.parts if message is not None else [], sort_keys=True, default=str)
    return f"edit:{message_id}:{hashlib.sha256(parts.encode()).hexdigest()[:16]}"


def durable_rewrite(
    window: MessageWindow, transcript: ClientTranscript, plan: Reconciliation | None = None
) -> DurableRewrite | None:
    """The durable form of an edit or a regeneration, or ``None`` when the request is not one
    (or also answers tool calls, or leaves no user message to answer)."""
    if transcript.trigger not in (SUBMIT, REGENERATE):
        return None
    plan = plan or reconcile_transcript(window, transcript)
    if plan.continuation or plan.answers or not plan.cut:
        return None
    if plan.append:
        if len(plan.append) != 1 or plan.append[0].role != "user":
            return None
        message = plan.append[0]
        return DurableRewrite(message, plan.cut[0], rewrite_key(SUBMIT, message.id, message), edit=True)
    gone = set(plan.cut)
    kept = [m for m in window.messages if m.id not in gone]
    if not kept or kept[-1].role != "user":
        return None
    return DurableRewrite(kept[-1], plan.cut[0], rewrite_key(REGENERATE, plan.cut[0]), edit=False)


def reconcile_transcript(window: MessageWindow, transcript: ClientTranscript) -> Reconciliation:
    """What ``transcript`` means for the stored history (worked out once per request)."""
    return reconcile(
        window.messages, transcript.messages, transcript.trigger, transcript.message_id, transcript.answers,
        waiting=window.waiting,
    )


def _settled_call_ids(message: UIMessage) -> set[str]:
    """The calls of a client's copy of an assistant message that it shows as answered."""
    return {
        str(p.get("toolCallId"))
        for p in message.parts
        if is_tool_part(p) and p.get("state") not in WAITING_STATES and p.get("state") != "input-streaming"
    }


class TranscriptGuard(Protocol):
    """Refuses (raises :class:`~think_core.errors.ClientRequestRefused`) a client's transcript
    that asks for what only the server may do, given the stored history (the ``window`` of it
    the request needs, see :func:`~think_core.chat.transcript.request_window`)."""

    async def __call__(self, window: MessageWindow, transcript: ClientTranscript) -> None: ...


class ChatSubmissions:
    """The chats of one session that run as its durable submissions."""

    def __init__(self, session_id: str, db: AsyncStore, queue: SubmissionQueue, guard: TranscriptGuard) -> None:
        self._session_id = session_id
        self._db = db
        self._queue = queue
        self._guard = guard

    async def source(
        self, transcript: ClientTranscript, body: dict[str, Any] | None, trigger: Trigger, sid: str
    ) -> AsyncGenerator[dict[str, Any], None] | None:
        """The stream of the durable submission a chat request is (a new message, a
        continuation, an edit or a regeneration; or one of those sent again), or ``None`` when
        it is none of them (answers that leave a call waiting, say)."""
        repeated = await self.retried_rewrite(transcript)
        if repeated is not None:
            return self.follow_accepted(repeated, sid)
        # Not the whole history: what the request names and the end of it (one snapshot).
        window = await request_window(self._db, self._session_id, transcript)
        # Refused before anything is stored: what only the server may write (client_authority).
        await self._guard(window, transcript)
        plan = reconcile_transcript(window, transcript)
        chat = durable_chat(window, transcript, plan)
        if chat is not None:
            return self.stream(chat, transcript, body, trigger, sid)
        continuation = durable_continuation(window, transcript, plan)
        if continuation is not None:
            return self.stream_continuation(continuation, transcript, sid)
        rewrite = durable_rewrite(window, transcript, plan)
        if rewrite is not None:
            return self.stream_rewrite(rewrite, transcript, body, trigger, sid)
        retried = await self.retried_continuation(transcript)
        if retried is not None:
            return self.follow_retried(retried, transcript, sid)
        return None

    async def stream(
        self, chat: DurableChat, transcript: ClientTranscript, body: dict[str, Any] | None, trigger: Trigger, sid: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Accept ``chat`` as a submission and follow its turn. The same message sent again
        waits for the turn it was accepted for and gets its answer replayed, as does a turn
        that another process ran. Closing the stream before the end cancels the turn, unless
        the transcript says otherwise (``stop_on_close``: an HTTP client that went away)."""
        queue = self._queue.listen(sid)
        row: Submission | None = None
        ended = False  # followed to its end (else the client closed the stream before it)
        try:
            row = await self._submission(chat, sid, trigger, body)
            streamed = False
            if row is not None and row.submission_id == sid:
                transcript.appended = list(chat.append)
                async for chunk in self._queue.follow(sid, queue):
                    streamed = True
                    yield chunk
            if streamed:
                ended = True
                return
            if row is not None:
                row = await self._queue.wait(row.submission_id)
            answer = row.answer_message_id if row is not None else chat.answer
            async for chunk in self._replay(answer):
                yield chunk
            ended = True
        finally:
            self._queue.unlisten(sid, queue)
            if not ended and transcript.stop_on_close and row is not None and row.status in ("pending", "running"):
                # Closed before its end (a client stopped the stream): stop the turn, as for every stream.
                # Shielded: the server closes a stream its client left from a cancelled scope, where
                # every await is cancelled at once; the cancel must still happen.
                await asyncio.shield(self._queue.cancel(row.submission_id))

    async def stream_continuation(
        self, continuation: DurableContinuation, transcript: ClientTranscript, sid: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Accept ``continuation`` as a submission and follow its turn (see :meth:`stream`)."""
        client_copy = next((m for m in transcript.messages if m.id == continuation.message.id), continuation.message)
        metadata = {TRIGGER_KEY: CONTINUE_TRIGGER, ANSWERS_KEY: [a.as_dict() for a in continuation.answers]}
        transcript.continuation = True
        transcript.answered = [continuation.answered_message()]
        async for chunk in self._accept_and_follow([client_copy], sid, continuation.key, metadata, transcript.stop_on_close):
            yield chunk

    async def stream_rewrite(
        self, rewrite: DurableRewrite, transcript: ClientTranscript, body: dict[str, Any] | None, trigger: Trigger, sid: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Accept an edit or a regeneration as a submission and follow its turn."""
        metadata: dict[str, Any] = {
            TRIGGER_KEY: trigger, REPLACING_KEY: rewrite.replacing_from, **({BODY_KEY: body} if body is not None else {})
        }
        transcript.appended = [rewrite.message] if rewrite.edit else []
        async for chunk in self._accept_and_follow([rewrite.message], sid, rewrite.key, metadata, transcript.stop_on_close):
            yield chunk

    async def _accept_and_follow(
        self, messages: list[UIMessage], sid: str, key: str, metadata: dict[str, Any], stop_on_close: bool
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Accept a submission keyed ``key`` and follow its turn, or the one the same key was
        accepted as before."""
        queue = self._queue.listen(sid)  # before the row exists: the drain may start at once
        try:
            row = await self._queue.submit(messages, submission_id=sid, idempotency_key=key, metadata=metadata)
        except BaseException:
            self._queue.unlisten(sid, queue)
            raise
        if row.submission_id != sid:  # accepted before: follow that one
            self._queue.unlisten(sid, queue)
            queue = self._queue.listen(row.submission_id)
        async for chunk in self._follow(row, sid, queue, stop_on_close=stop_on_close):
            yield chunk

    async def retried_rewrite(self, transcript: ClientTranscript) -> Submission | None:
        """The edit or regeneration a request repeats (by its ``messageId``), if it was accepted."""
        message_id = transcript.message_id
        if message_id is None:
            return None
        if transcript.trigger == REGENERATE:
            key = rewrite_key(REGENERATE, message_id)
        elif transcript.trigger == SUBMIT:
            edited = next((m for m in transcript.messages if m.id == message_id and m.role == "user"), None)
            if edited is None:
                return None
            key = rewrite_key(SUBMIT, message_id, edited)
        else:
            return None
        return await self._db.get_submission_by_key(self._session_id, key)

    async def follow_accepted(self, row: Submission, sid: str) -> AsyncGenerator[dict[str, Any], None]:
        """Follow a submission accepted by an earlier request, or replay its answer."""
        async for chunk in self._follow(row, sid, self._queue.listen(row.submission_id)):
            yield chunk

    async def retried_continuation(self, transcript: ClientTranscript) -> Submission | None:
        """The continuation a request repeats (a client sending the same answers again, after
        they were applied): the latest one of its last message whose answered calls the
        client's copy shows as answered."""
        last = transcript.messages[-1] if transcript.messages else None
        if last is None or last.role != "assistant" or transcript.trigger != SUBMIT:
            return None
        prefix = f"continue:{last.id}:"
        settled = _settled_call_ids(last)
        for row in await self._db.submissions_by_key_prefix(self._session_id, prefix):  # latest first
            key = row.idempotency_key or ""
            if key.startswith(prefix) and set(key[len(prefix) :].split(",")) <= settled:
                return row
        return None

    async def follow_retried(
        self, row: Submission, transcript: ClientTranscript, sid: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Follow the continuation ``row`` that a request repeats, or replay its answer."""
        transcript.continuation = True
        async for chunk in self._follow(row, sid, self._queue.listen(row.submission_id)):
            yield chunk

    async def _follow(
        self, row: Submission, sid: str, queue: asyncio.Queue[Any], *, stop_on_close: bool = True
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The chunks of ``row``'s turn while it runs here (``queue`` listens to it), else its
        stored answer replayed. Closing the stream of the request that accepted it cancels it
        when ``stop_on_close``."""
        mine = row.submission_id == sid
        ended = False  # followed to its end (else the client closed the stream before it)
        try:
            streamed = False
            if mine or row.status in ("pending", "running"):
                async for chunk in self._queue.follow(row.submission_id, queue):
                    streamed = True
                    yield chunk
            if streamed:
                ended = True
                return
            row = await self._queue.wait(row.submission_id)
            async for chunk in self._replay(row.answer_message_id):
                yield chunk
            ended = True
        finally:
            self._queue.unlisten(row.submission_id, queue)
            if not ended and mine and stop_on_close and row.status in ("pending", "running"):
                # Shielded, as for a chat: the server closes a stream from a cancelled scope.
                await asyncio.shield(self._queue.cancel(row.submission_id))

    async def _replay(self, answer: str | None) -> AsyncGenerator[dict[str, Any], None]:
        """The chunks of the stored answer ``answer`` (looked up by id), if there is one."""
        message = await self._db.get_message(self._session_id, answer) if answer is not None else None
        for chunk in replay_chunks(message) if message is not None else ():
            yield chunk

    async def _submission(
        self, chat: DurableChat, sid: str, trigger: Trigger, body: dict[str, Any] | None
    ) -> Submission | None:
        """The submission of a chat: accepted now, or the one the same message was accepted as
        before; ``None`` when the message was answered outside any submission."""
        metadata: dict[str, Any] = {TRIGGER_KEY: trigger, **({BODY_KEY: body} if body is not None else {})}
        if not chat.append:
            row = await self._db.get_submission_by_key(self._session_id, chat.key)
            if row is not None:
                return row
            if chat.answer is not None:
                return None
        accepted = await self._queue.submit(
            chat.append or [chat.message], submission_id=sid, idempotency_key=chat.key, metadata=metadata
        )
        return accepted
