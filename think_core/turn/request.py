"""What an entry path hands the turn runner, and what comes back from a turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..events import Usage
from ..types import ErrorClassification, ErrorStage, Trigger, TurnConfig
from .intake import Intake, MessagesIntake
from .journal import Journal, NullJournal
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
    :param intake: how the input arrives and where the answer goes (see :mod:`think_core.turn.intake`):
        the messages of ``incoming`` appended (the default), a chat client's transcript applied,
        a durable submission's messages applied and its answer stored with its completion.
    :param answers: the id of the message this turn answers (a durable submission's user
        message): the model sees the history up to that message, never a later one.
    :param journal: what the turn records as it goes (a durable submission's step journal, from
        which a turn interrupted by a crash resumes; a :class:`NullJournal` otherwise).
    :param resumable: record the turn's chunks (see :mod:`think_core.runner.streams`), so that a
        client joining late replays and follows them.
    :param message_ids: the ids of the user messages the turn answers (told to clients when it
        ends); by default the trailing user messages of ``incoming``.
    :param config: this call's settings (``session.chat(input, config=TurnConfig(...))``), laid
        over the agent's defaults; ``before_turn``'s answer is laid over both.
    """

    trigger: Trigger
    incoming: Any = None
    continuation: bool = False
    body: dict[str, Any] | None = None
    emit: Emit = None
    request_id: str | None = None
    intake: Intake = field(default_factory=MessagesIntake)
    answers: str | None = None
    journal: Journal = field(default_factory=NullJournal)
    resumable: bool = False
    message_ids: list[str] | None = None
    config: TurnConfig | None = None


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


