"""What a store shared by several machines adds to the :class:`~think_core.store.base.Store`
protocol (optional: a store without it serves one process, or several on one SQLite file).

- :meth:`SharedSessions.session_lock`: a lock per session held across every process sharing the
  store, so that a session runs one turn at a time wherever its messages arrive.
- :meth:`SharedSessions.listen_streams`: word that a turn started streaming in another process,
  so a server can relay it to the WebSocket clients connected to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["SessionLock", "SharedSessions", "StreamListener"]


class SessionLock(Protocol):
    """One session's lock across processes. Both methods are synchronous and short (they run on
    a worker thread); the lock is released by the database when its holder's process dies."""

    def try_acquire(self) -> bool:
        """Take the lock if no other process holds it; ``False`` (at once) otherwise."""
        ...

    def release(self) -> None: ...


#: ``callback(session_id, stream_id)``, called on the listener's own thread.
StreamListener = Callable[[str, str], None]


@runtime_checkable
class SharedSessions(Protocol):
    def session_lock(self, session_id: str) -> SessionLock: ...

    def listen_streams(self, callback: StreamListener) -> Callable[[], None]:
        """Call ``callback`` for every stream another store instance (another process) opens,
        until the returned function is called."""
        ...
