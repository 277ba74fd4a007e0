"""Server chats as durable submissions.

A chat client's request that only adds a user message (the common case: ``useChat``'s
``sendMessage``, a ``cf_agent_use_chat_request``) is accepted as a durable submission before
its turn starts, keyed by that message's id, and the client follows the turn the drain runs
for it. So a chat survives a crash like any submission, and the same message sent again — a
retry, a reload, a client that reconnects — follows the same turn or gets its stored answer
replayed, never a second answer. Regenerations, edits and tool answers are applied to the
history as before (see :mod:`think_core.transcript`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .store import Submission
from .submissions import BODY_KEY, TRIGGER_KEY, SubmissionQueue
from .transcript import SUBMIT, ClientTranscript, reconcile
from .types import Trigger, UIMessage
from .ui_stream import replay_chunks

if TYPE_CHECKING:
    from .store import AsyncStore

__all__ = ["ChatSubmissions", "DurableChat", "durable_chat"]


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


def durable_chat(stored: Sequence[UIMessage], transcript: ClientTranscript) -> DurableChat | None:
    """The durable form of a chat request, or ``None`` when it does more than add a user
    message: a regeneration, an edit (it cuts the history), tool answers, a continuation."""
    if transcript.trigger != SUBMIT or transcript.answers or not transcript.messages:
        return None
    last = transcript.messages[-1]
    if last.role != "user":
        return None
    ids = [m.id for m in stored]
    message_id = transcript.message_id
    if message_id == last.id and last.id in ids and stored[ids.index(last.id)].parts == last.parts:
        message_id = None  # "editing" a message into what it already says: the same message, sent again
    plan = reconcile(stored, transcript.messages, transcript.trigger, message_id)
    if plan.cut or plan.answers or plan.continuation:
        return None
    after = ids.index(last.id) + 1 if last.id in ids else len(ids)
    answer = stored[after].id if after < len(stored) and stored[after].role == "assistant" else None
    return DurableChat(last, plan.append, answer)



class ChatSubmissions:
    """The chats of one session that run as its durable submissions."""

    def __init__(self, session_id: str, db: AsyncStore, queue: SubmissionQueue) -> None:
        self._session_id = session_id
        self._db = db
        self._queue = queue

    async def stream(
        self, chat: DurableChat, transcript: ClientTranscript, body: dict[str, Any] | None, trigger: Trigger, sid: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Accept ``chat`` as a submission and follow its turn. The same message sent again
        waits for the turn it was accepted for and gets its answer replayed, as does a turn
        that another process ran. Closing the stream before the end cancels the turn."""
        queue = self._queue.listen(sid)
        row: Submission | None = None
        try:
            row = await self._submission(chat, sid, trigger, body)
            streamed = False
            if row is not None and row.submission_id == sid:
                transcript.appended = list(chat.append)
                async for chunk in self._queue.follow(sid, queue):
                    streamed = True
                    yield chunk
            if streamed:
                return
            if row is not None:
                row = await self._queue.wait(row.submission_id)
            answer = row.answer_message_id if row is not None else chat.answer
            stored = [m for m in await self._db.list_messages(self._session_id) if m.id == answer]
            for chunk in replay_chunks(stored[0]) if stored else ():
                yield chunk
        finally:
            self._queue.unlisten(sid, queue)
            if row is not None and row.status in ("pending", "running"):
                # Closed before its end (a client stopped the stream): stop the turn, as for every stream.
                # Shielded: the server closes a stream its client left from a cancelled scope, where
                # every await is cancelled at once; the cancel must still happen.
                await asyncio.shield(self._queue.cancel(row.submission_id))

    async def _submission(
        self, chat: DurableChat, sid: str, trigger: Trigger, body: dict[str, Any] | None
    ) -> Submission | None:
        """The submission of a chat: accepted now, or the one the same message was accepted as
        before; ``None`` when the message was answered outside any submission."""
        metadata: dict[str, Any] = {TRIGGER_KEY: trigger, **({BODY_KEY: body} if body is not None else {})}
        if not chat.append:
            for row in await self._db.list_submissions(self._session_id):
                if row.idempotency_key == chat.key:
                    return row
            if chat.answer is not None:
                return None
        accepted = await self._queue.submit(
            chat.append or [chat.message], submission_id=sid, idempotency_key=chat.key, metadata=metadata
        )
        return accepted
