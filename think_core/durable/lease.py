"""Keeping a running submission's lease alive from a thread of its own.

Another process retakes a ``running`` submission once its lease expires. The lease must
therefore be renewed even while the event loop is blocked — by a sync hook that sleeps or makes
a blocking call — or a slow turn would be run twice. So the renewal does not run on the loop:
a small thread calls the (thread-safe) synchronous store three times per lease. When a renewal
finds the row no longer running (it was finished or cancelled elsewhere), the turn is
cancelled on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from ..store import Store

__all__ = ["LeaseKeeper"]

logger = logging.getLogger("think.submissions")


class LeaseKeeper:
    """Renews the lease of ``submission_id`` every ``interval`` seconds until :meth:`stop`."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        submission_id: str,
        *,
        interval: float,
        on_lost: Callable[[], object],
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._submission_id = submission_id
        self._interval = interval
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._renew_until_stopped, name=f"think-lease-{submission_id}", daemon=True
        )

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing. Does not wait for the thread: a renewal in flight may be waiting for
        the database, and the loop must not wait with it."""
        self._stopped.set()

    def _renew_until_stopped(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                still_ours = self._store.heartbeat_submission(self._session_id, self._submission_id)
            except Exception:
                if not self._stopped.is_set():
                    logger.warning("heartbeat of submission %s failed; retrying", self._submission_id, exc_info=True)
                continue
            if not still_ours:
                if not self._stopped.is_set():
                    logger.warning("submission %s was finished elsewhere; cancelling its turn here", self._submission_id)
                    self._loop.call_soon_threadsafe(self._on_lost)
                return
