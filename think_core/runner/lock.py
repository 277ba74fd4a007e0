"""A session's turn lock: one turn at a time, in arrival order — in this process, and across every
process sharing the store when the store can lock a session for them (PostgreSQL: an advisory
lock per session).

Inside a process an :class:`asyncio.Lock` keeps the order (FIFO); the turn at its head then takes
the store's lock, so two servers receiving messages for one session run their turns one after
the other and never interleave. Taking the store's lock is polled (short, cancellable tries,
backing off to :data:`MAX_POLL` seconds) rather than a blocking wait, so a cancelled turn never
leaves a thread blocked in the database holding a lock nobody will release.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..store.shared import SessionLock

if TYPE_CHECKING:
    from ..store import AsyncStore

logger = logging.getLogger("think.runner")

#: Longest pause between two tries for a session another process holds.
MAX_POLL = 0.1


class TurnLock:
    """``async with lock:`` — the turn lock of ``session_id``; see the module docstring."""

    def __init__(self, db: AsyncStore, session_id: str) -> None:
        self._local = asyncio.Lock()
        shared = db.shared
        self._shared: SessionLock | None = shared.session_lock(session_id) if shared is not None else None

    def locked(self) -> bool:
        return self._local.locked()

    async def acquire(self) -> None:
        await self._local.acquire()
        if self._shared is None:
            return
        try:
            await self._acquire_shared(self._shared)
        except BaseException:
            self._local.release()
            raise

    @staticmethod
    async def _acquire_shared(shared: SessionLock) -> None:
        delay = 0.005
        while True:
            attempt = asyncio.ensure_future(asyncio.to_thread(shared.try_acquire))
            try:
                if await asyncio.shield(attempt):
                    return
            except asyncio.CancelledError:
                # The try may have succeeded in its thread after all: never keep a lock we leave.
                if not attempt.cancelled() and list(await asyncio.gather(attempt, return_exceptions=True)) == [True]:
                    await asyncio.to_thread(shared.release)
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_POLL)

    async def release(self) -> None:
        """Release the store's lock (even while this task is being cancelled), then the local one."""
        try:
            if self._shared is not None:
                releasing = asyncio.ensure_future(asyncio.to_thread(self._shared.release))
                try:
                    await asyncio.shield(releasing)
                except asyncio.CancelledError:
                    await asyncio.gather(releasing, return_exceptions=True)
                    raise
                except Exception:
                    # The lock dies with its connection at worst; the turn must not fail for it.
                    logger.exception("releasing the shared turn lock failed")
        finally:
            self._local.release()

    async def __aenter__(self) -> TurnLock:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()
