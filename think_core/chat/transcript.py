"""A chat client's whole transcript, applied to a session's history.

Chat clients (AI SDK ``useChat``, Cloudflare's agents client) send the *whole* transcript with
every request, while the engine is server-authoritative and appends only what is new. A
request can also replace part of the history — a ``submit-message`` naming a stored
``messageId`` edits that message, a ``regenerate-message`` redoes an answer — and it can answer
pending tool calls, by resending an assistant message whose tool parts the client settled (a
client tool's result, a human's approval).

:func:`reconcile` works out what a request means from the stored history, without side
effects. :meth:`ClientTranscript.apply` carries it out; the session runs it under its turn
lock, so reading the history, cutting it and appending to it never interleave with another
turn of the session (see ``Session.stream_transcript``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..messages import is_tool_part, origin_message_ids
from ..turn.intake import HistoryStore, MessagesIntake, TurnRequestFields
from ..turn.pending_calls import ToolAnswer, apply_answer
from ..types import Trigger, UIMessage
from .authority import REGENERATE, check_replacement, waiting_parts

if TYPE_CHECKING:
    from ..store import AsyncStore, MessageWindow, Store

SUBMIT = "submit-message"

#: The trigger of the turn that continues an answered assistant message.
CONTINUE_TRIGGER: Trigger = "auto_continue"


@dataclass(frozen=True)
class Reconciliation:
    """What a client's request does to the stored history, in this order: answer ``answers``,
    delete ``cut``, append ``append``. A ``continuation`` only answers tool calls: the answered
    message is continued (when none of its calls is left waiting), nothing is cut or appended."""

    cut: list[str]
    append: list[UIMessage]
    answers: list[ToolAnswer]
    continuation: bool = False


def new_messages(stored: Sequence[UIMessage], incoming: Sequence[UIMessage]) -> list[UIMessage]:
    """The incoming messages whose ids are not persisted yet, in the client's order."""
    known = {m.id for m in stored}
    return [m for m in incoming if m.id not in known]


def regenerate_cut(stored: Sequence[UIMessage], incoming: Sequence[UIMessage], message_id: str | None) -> list[str]:
    """Ids of the stored messages a ``regenerate-message`` request replaces.

    The AI SDK drops the message being regenerated (``messageId``, else the last assistant
    message) and everything after it, then resends the rest. The stored tail after the last
    message the client still has goes, and so does ``messageId`` itself when it is stored.
    """
    ids = [m.id for m in stored]
    cut = len(ids)
    if message_id is not None and message_id in ids:
        cut = ids.index(message_id)
    client_ids = {m.id for m in incoming}
    kept = [i for i, mid in enumerate(ids[:cut]) if mid in client_ids]
    if kept:
        cut = min(cut, kept[-1] + 1)
    elif message_id is None and ids and stored[-1].role == "assistant":
        cut = len(ids) - 1
    return ids[cut:]


def superseded(
    stored: Sequence[UIMessage], incoming: Sequence[UIMessage], trigger: str, message_id: str | None
) -> list[str]:
    """Ids of the stored messages a chat request replaces: a regeneration's cut, or — for a
    ``submit-message`` naming a stored ``messageId`` (the AI SDK's edit of an earlier message) —
    that message and everything after it. The client's version is then appended as new."""
    if trigger == REGENERATE:
        return regenerate_cut(stored, incoming, message_id)
    ids = [m.id for m in stored]
    if message_id is not None and message_id in ids:
        return ids[ids.index(message_id):]
    return []


def _answer(call_id: str, part: dict[str, Any], stored_state: Any) -> ToolAnswer | None:
    state = part.get("state")
    if state == "output-available":
        return ToolAnswer(call_id, output=part.get("output"))
    if state == "output-error":
        return ToolAnswer(call_id, error=str(part.get("errorText") or "Tool execution failed."))
    approval = part.get("approval")
    if state == "approval-responded" and stored_state == "approval-requested" and isinstance(approval, dict):
        if isinstance(approval.get("approved"), bool):
            reason = approval.get("reason")
            return ToolAnswer(call_id, approved=approval["approved"], reason=reason if isinstance(reason, str) else None)
    return None


def settled_answers(stored: Sequence[UIMessage], incoming: Sequence[UIMessage]) -> list[ToolAnswer]:
    """Answers to the calls pending on the server that the client resends as settled: a tool
    part in ``output-available`` or ``output-error`` (how an AI SDK client returns a client
    tool's result), or in ``approval-responded`` (its answer to an approval request)."""
    pending = waiting_parts(stored)
    answers: list[ToolAnswer] = []
    for message in incoming:
        if message.role != "assistant":
            continue
        for part in message.parts:
            call_id = part.get("toolCallId")
            if not is_tool_part(part) or call_id not in pending:
                continue
            answer = _answer(call_id, part, pending[call_id].get("state"))
            if answer is not None:
                answers.append(answer)
    return answers


def reconcile(
    stored: Sequence[UIMessage],
    incoming: Sequence[UIMessage],
    trigger: str = SUBMIT,
    message_id: str | None = None,
    answers: Sequence[ToolAnswer] = (),
    *,
    waiting: Sequence[UIMessage] | None = None,
) -> Reconciliation:
    """What a chat request means for the ``stored`` history.

    ``stored`` may be the end of the history only (see :func:`request_window`), then
    ``waiting`` holds the assistant messages with calls waiting for the client, wherever they
    are (by default, those of ``stored``).

    A ``submit-message`` that brings tool answers (given, or found in the transcript) and no new
    message is a continuation: it must not cut, even though the AI SDK names the answered
    assistant message in ``messageId``. Answers that come with a new message are recorded, then
    the message is answered in one normal turn that sees both. A regeneration ignores answers.
    """
    if trigger != SUBMIT:
        answers = ()
    else:
        answers = [*answers, *settled_answers(stored if waiting is None else waiting, incoming)]
    if answers and not new_messages(stored, incoming):
        return Reconciliation([], [], list(answers), continuation=True)
    cut = superseded(stored, incoming, trigger, message_id)
    gone = set(cut)
    kept = [m for m in stored if m.id not in gone]
    # Only the client's user messages are stored: its copy of an assistant message is never an
    # answer (the server writes those; see ``client_authority``, which refused the rest).
    append = [m for m in new_messages(kept, incoming) if m.role == "user"]
    return Reconciliation(cut, append, list(answers))


async def request_window(db: AsyncStore, session_id: str, transcript: ClientTranscript) -> MessageWindow:
    """The part of the stored history a chat request is checked and reconciled against, read
    in one snapshot without reading the whole history: from one message before the first
    stored message the request names (its messages, its ``messageId``) to the last message —
    at least the last two — and every assistant message whose calls wait for the client.

    That is every stored message a check or :func:`reconcile` looks at: the named ones (known
    or new, their role, the calls an assistant's copy may name), what follows them (what an
    edit or a regeneration cuts, the answer a message already has), the message before a cut
    (the user message a regeneration answers again), the last message (what a continuation
    continues) and the waiting calls the request may answer. So a request that names only new
    messages costs the same however long the conversation is; one that sends the whole
    transcript (``useChat``'s default) names, and so reads, all of it."""
    named = [m.id for m in transcript.messages]
    if transcript.message_id is not None:
        named.append(transcript.message_id)

    def read(store: Store) -> MessageWindow:
        # With the session's stream (the guard asks what streams now): one snapshot, one trip.
        window = store.message_window(session_id, named, before=1, last=2)
        return dataclasses.replace(window, stream=store.get_stream(session_id), stream_read=True)

    return await db.atomic(read, session_id=session_id, read_only=True)


def message_with_tool_call(messages: Sequence[UIMessage], tool_call_id: str) -> UIMessage | None:
    for message in reversed(messages):
        if any(is_tool_part(p) and p.get("toolCallId") == tool_call_id for p in message.parts):
            return message
    return None


def replacement(stored: Sequence[UIMessage], incoming: Sequence[UIMessage]) -> tuple[list[str], list[UIMessage]]:
    """``(ids to delete, messages to append)`` that turn ``stored`` into ``incoming``: what the
    two share from the start stays (with its compactions), the rest is replaced."""
    same = 0
    for old, new in zip(stored, incoming, strict=False):
        if old.id != new.id or old.role != new.role or old.parts != new.parts or old.metadata != new.metadata:
            break
        same += 1
    return [m.id for m in stored[same:]], list(incoming[same:])


async def replace_history(
    db: HistoryStore, session_id: str, messages: Sequence[UIMessage], *, from_client: bool = False
) -> None:
    """Make the stored history equal ``messages``. The caller holds the session's turn lock.

    ``from_client``: a chat client's whole transcript (its ``setMessages``), which may keep,
    trim, edit its user messages and add new ones, but not write the assistant's (see
    :func:`~think_core.chat.authority.check_replacement`)."""
    ids = [m.id for m in messages]
    if len(set(ids)) != len(ids):
        raise ValueError("the transcript holds the same message id twice")
    stored = await db.list_messages(session_id)
    if from_client:
        messages = check_replacement(stored, messages)
    cut, append = replacement(stored, messages)
    if cut:
        await db.delete_messages(session_id, cut)
    if append:
        await db.append_messages(session_id, append)


@dataclass
class ClientTranscript:
    """What a chat client sent — its messages, the AI SDK ``trigger`` and ``messageId``, and any
    tool answers it gave outside the transcript — and, once applied, what that did.

    ``continuation``, ``appended`` and ``answered`` are set by :meth:`apply`, which runs before
    the turn's first chunk, so a transport can read them when that chunk arrives.
    """

    messages: list[UIMessage] = field(default_factory=list)
    trigger: str = SUBMIT
    message_id: str | None = None
    answers: list[ToolAnswer] = field(default_factory=list)
    auto_continue: bool = True
    #: Whether closing the stream of this request stops its turn (a WebSocket's cancel frame and
    #: ``session.stream()`` do; an HTTP response the client closed — a reload — does not).
    stop_on_close: bool = True
    continuation: bool = False
    appended: list[UIMessage] = field(default_factory=list)
    answered: list[UIMessage] = field(default_factory=list)

    async def apply(self, db: HistoryStore, session_id: str, request: TurnRequestFields) -> bool:
        """Carry the transcript out on the history and set up ``request``; ``False`` when no
        turn is due (the answers left a call waiting, or ``auto_continue`` is off).

        The caller holds the session's turn lock. A continuation runs with the body of the turn
        it continues (``body`` cleared), as every auto-continuation does.
        """
        plan = reconcile(await db.list_messages(session_id), self.messages, self.trigger, self.message_id, self.answers)
        ready = False
        for answer in plan.answers:
            # Only the last answer decides: the AI SDK resends a message once all its calls are settled.
            ready = await apply_answer(db, session_id, answer.tool_call_id, answer.settle())
        if plan.answers:
            history = await db.list_messages(session_id)
            found = (message_with_tool_call(history, a.tool_call_id) for a in plan.answers)
            self.answered = list({m.id: m for m in found if m is not None}.values())
        if plan.continuation:
            self.continuation = True
            request.trigger, request.continuation, request.body = CONTINUE_TRIGGER, True, None
            return ready and self.auto_continue
        if plan.cut:
            await db.delete_messages(session_id, plan.cut)
        self.appended = request.incoming = plan.append
        request.message_ids = origin_message_ids(self.messages)
        return True


class TranscriptIntake(MessagesIntake):
    """The intake of a chat client's transcript (see :mod:`think_core.turn.intake`): applied when the
    turn is admitted — its answers recorded, what it replaces cut, its new messages set as the
    turn's incoming ones (``False``, no turn, when its answers leave a call waiting)."""

    def __init__(self, transcript: ClientTranscript) -> None:
        self.transcript = transcript

    async def admit(self, db: HistoryStore, session_id: str, request: TurnRequestFields) -> bool:
        return await self.transcript.apply(db, session_id, request)
