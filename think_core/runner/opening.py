"""Opening a session once per process, before its first turn: what ``Session.open`` awaits.

Every entry path awaits the opening, so several first calls can arrive together: one runs the
opening steps, the others wait for it and resume in their arrival order. An opening that fails
or is cancelled is not remembered: its waiters get its error and the next call opens again (a
plugin's failing ``configure_session`` must not break the session for good). A waiter cancelled
itself is cancelled; one whose opener was cancelled goes on to open in its place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["Opening"]


class Opening:
    """Runs ``steps`` once (again after a failed attempt); see the module docstring."""

    def __init__(self, steps: Callable[[], Awaitable[None]]) -> None:
        self._steps = steps
        self._attempt: asyncio.Future[None] | None = None

    @property
    def done(self) -> bool:
        """Whether the steps have completed in this process."""
        return self._attempt is not None and self._attempt.done() and not self._attempt.cancelled()

    async def __call__(self) -> None:
        while True:
            if self._attempt is None:
                await self._open()
                return
            attempt = self._attempt
            try:
                await asyncio.shield(attempt)
                return
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if attempt.done() and not attempt.cancelled() and task is not None and not task.cancelling():
                    continue  # the opener was cancelled, not us: open again ourselves
                raise

    async def _open(self) -> None:
        opening = self._attempt = asyncio.get_running_loop().create_future()
        try:
            await self._steps()
        except BaseException as exc:
            # Callers waiting on this attempt get its error; the next caller tries again.
            self._attempt = None
            opening.set_exception(exc)
            opening.exception()  # retrieved: each waiter re-raises it
            raise
        # Waiters resume only after this task has gone on to queue for the turn lock, so
        # concurrent first calls keep their order.
        opening.set_result(None)
