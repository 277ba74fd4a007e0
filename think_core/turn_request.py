"""What an entry path hands the turn runner, and what comes back from a turn."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .events import Usage
from .turn_journal import Journal, NullJournal
from .types import ErrorClassification, ErrorStage, Trigger, UIMessage
from .ui_stream import Emit

__all__ = ["TurnFailed", "TurnOutcome", "TurnRequest"]


@dataclass
class TurnRequest:
    """One request to run a turn, as every entry path builds it.

    :param trigger: the entry path (``chat``, ``stream``, ``save_messages``, ``submit``,
        ``continue``, ``auto_continue``, ``websocket``, ``http``); ``TurnContext.trigger``.
    :param incoming: messages to append before the turn, a function of the stored history that
        returns them (resolved under the turn lock), or ``None``.
    :param continuation: the turn continues the last assistant message.
    :param body: extra client data for this turn (``None`` on a continuation: the last body).
    :param emit: receives every UI message stream chunk (a plain function).
    :param request_id: the turn's id (generated when ``None``).
    :param apply_incoming: writes the turn's input itself, under the lock (durable submissions).
    :param should_apply: awaited under the lock before anything else; ``False`` skips the turn.
        It may prepare the turn and rewrite this request (a chat client's transcript does).
    :param answers: the id of the message this turn answers (a durable submission's user
        message): the model sees the history up to that message, never a later one.
    :param journal: what the turn records as it goes (a durable submission's step journal, from
        which a turn interrupted by a crash resumes; a :class:`NullJournal` otherwise).
    :param store_answer: stores the turn's answer (``None`` when it has no parts) with its
        outcome, in place of a plain upsert (a durable submission: answer and completion in one
        transaction); ``False`` when the store refused it (the submission is not ours any more).
    :param resumable: record the turn's chunks (see :mod:`think_core.stream_log`), so that a
        client joining late replays and follows them.
    :param message_ids: the ids of the user messages the turn answers (told to clients when it
        ends); by default the trailing user messages of ``incoming``.
    """

    trigger: Trigger
    incoming: Any = None
    continuation: bool = False
    body: dict[str, Any] | None = None
    emit: Emit = None
    request_id: str | None = None
    apply_incoming: Callable[[], Awaitable[Any]] | None = None
    should_apply: Callable[[], Awaitable[bool]] | None = None
    answers: str | None = None
    journal: Journal = field(default_factory=NullJournal)
    store_answer: Callable[[UIMessage | None, TurnOutcome], Awaitable[bool]] | None = None
    resumable: bool = False
    message_ids: list[str] | None = None


class TurnFailed(Exception):
    """Internal: a turn error with the stage it happened at."""

    def __init__(self, error: BaseException, stage: ErrorStage, streamed: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        self.stage = stage
        self.streamed = streamed  # whether the failed step had produced output
        self.classification: ErrorClassification | None = None
        self.classified = False  # classify_chat_error was consulted (its answer may be None)


@dataclass
class TurnOutcome:
    status: str  # completed | error | aborted
    error_text: str | None = None
    output: Any = None
    usage: Usage = field(default_factory=Usage)


