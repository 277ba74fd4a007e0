"""The parts of a session that only some entry paths use, made on first use.

Durable submissions (``submit_messages`` and a client's chat requests), the answers to waiting
tool calls and the stop button each keep a little state and a few references. A session that
only chats in-process — or sits idle, one of the many a server keeps — needs none of them, so
it holds none: fewer objects per session, fewer for the garbage collector to walk.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..durable.queue import SubmissionQueue
from .answers import Spawn, ToolAnswers
from .attachments import AttachmentLimits
from .guard import ClientGuard
from .stop import StopButton
from .submissions import ChatSubmissions

if TYPE_CHECKING:
    from ..runner.streams import SessionStreams
    from ..runner.turn_runner import TurnRunner
    from ..store import AsyncStore
    from ..tools import AnyTool

__all__ = ["EntryParts"]


class EntryParts:
    """A session's submission queue, client-chat intake, tool answers and stop button."""

    def __init__(
        self,
        session_id: str,
        db: AsyncStore,
        runner: TurnRunner,
        streams: SessionStreams,
        *,
        tools: Mapping[str, AnyTool],
        attachments: AttachmentLimits,
        lease: float,
        spawn: Spawn,
    ) -> None:
        self._session_id = session_id
        self._db = db
        self._runner = runner
        self._streams = streams
        self._tools = tools
        self._attachments = attachments
        self._lease = lease
        self._spawn = spawn

    @property
    def made_submissions(self) -> bool:
        """Whether the submission queue was made (else there is no drain to stop)."""
        return "submissions" in self.__dict__

    @functools.cached_property
    def submissions(self) -> SubmissionQueue:
        runner = self._runner
        return SubmissionQueue(self._session_id, self._db, lease=self._lease, run_turn=runner.run, cancel=runner.cancel)

    @functools.cached_property
    def chats(self) -> ChatSubmissions:
        guard = ClientGuard(self._streams, self._tools, self._attachments)
        return ChatSubmissions(self._session_id, self._db, self.submissions, guard)

    @functools.cached_property
    def answers(self) -> ToolAnswers:
        return ToolAnswers(self._session_id, self._db, self._runner, self._spawn)

    @functools.cached_property
    def stop(self) -> StopButton:
        return StopButton(self._session_id, self._db, self._streams, self._runner, self.submissions)
