"""A chat client's stop button: which turn of the session it stops, and stopping it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..durable.queue import SubmissionQueue
    from ..runner.streams import SessionStreams
    from ..runner.turn_runner import TurnRunner
    from ..store import AsyncStore

__all__ = ["StopButton"]


class StopButton:
    """Stops the answer being written now in one session (see :meth:`think_core.session.Session.stop`)."""

    def __init__(
        self, session_id: str, db: AsyncStore, streams: SessionStreams, runner: TurnRunner, queue: SubmissionQueue
    ) -> None:
        self._session_id = session_id
        self._db = db
        self._streams = streams
        self._runner = runner
        self._queue = queue

    async def press(self) -> list[str]:
        """Cancel the turn streaming now or, with none streaming yet, the first chat still
        waiting for its turn (those queued behind it still run); the ids of the turns stopped."""
        live = await self._streams.find()
        if live is not None and live.streaming:
            target: str | None = live.stream_id
        else:
            first = await self._db.list_submissions(self._session_id, status=("pending", "running"), limit=1)
            target = first[0].submission_id if first else None
        if target is None:
            return []
        if self._runner.cancel(target) or await self._queue.cancel(target):
            return [target]
        return []
