"""PostgreSQL's side of :mod:`think_core.store.shared`: session locks and stream notifications.

Session locks are session-level advisory locks, all on one dedicated autocommit connection per
store (a lock belongs to the connection that took it, and PostgreSQL drops it when that
connection ends — so a process killed mid-turn frees its sessions at once). Keys are
``hashtextextended(schema:session_id)``, so stores on different schemas never collide.

Stream notifications are ``NOTIFY`` on a channel per schema, sent once the stream's row is
committed (so a listener never hears of a stream it cannot read yet), and heard by a thread that
``LISTEN`` s on its own connection.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from ..errors import StoreUnavailable
from .shared import StreamListener

logger = logging.getLogger("think.store")

#: Seconds the listener waits for a notification before it checks whether it should stop.
LISTEN_TICK = 0.5
#: Seconds between two attempts to listen again after the connection broke.
RECONNECT_DELAY = 1.0


def stream_channel(schema: str) -> str:
    return f"think_streams_{schema}"[:63]


def notify_stream(conn: psycopg.Connection[Any], schema: str, owner: str, session_id: str, stream_id: str) -> None:
    """Announce a stream that store ``owner`` opened (delivered when ``conn`` 's transaction
    commits, at once in autocommit)."""
    payload = json.dumps({"session": session_id, "stream": stream_id, "owner": owner}, separators=(",", ":"))
    conn.execute("SELECT pg_notify(%s, %s)", (stream_channel(schema), payload))


class PgSessionLocks:
    """Factory and holder of the advisory locks of one store."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self._conninfo = conninfo
        self._schema = schema
        self._mutex = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._held: set[str] = set()

    def lock(self, session_id: str) -> PgSessionLock:
        return PgSessionLock(self, session_id)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            if self._held:
                # The connection that held them is gone, and with it the locks: say so once.
                logger.warning("lost the PostgreSQL connection holding %d session locks", len(self._held))
                self._held.clear()
            self._conn = psycopg.connect(self._conninfo, autocommit=True)
        return self._conn

    def _key(self, session_id: str) -> str:
        return f"{self._schema}:{session_id}"

    def try_acquire(self, session_id: str) -> bool:
        with self._mutex:
            try:
                row = self._try_lock(session_id)
            except psycopg.OperationalError:
                # The lock connection died with the server (a restart): once more on a new one.
                try:
                    row = self._try_lock(session_id)
                except psycopg.OperationalError as exc:
                    raise StoreUnavailable(f"PostgreSQL connection for session locks lost: {exc}") from exc
            taken = bool(row and row[0])
            if taken:
                self._held.add(session_id)
            return taken

    def _try_lock(self, session_id: str) -> Any:
        return self._connection().execute(
            "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (self._key(session_id),)
        ).fetchone()

    def release(self, session_id: str) -> None:
        with self._mutex:
            if session_id not in self._held:
                return
            self._held.discard(session_id)
            if self._conn is None or self._conn.closed:
                return  # released by the server with its connection
            with contextlib.suppress(psycopg.OperationalError):  # a lost connection took it along
                self._conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (self._key(session_id),))

    def close(self) -> None:
        with self._mutex:
            self._held.clear()
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class PgSessionLock:
    """One session's advisory lock (see :class:`~think_core.store.shared.SessionLock`)."""

    def __init__(self, locks: PgSessionLocks, session_id: str) -> None:
        self._locks = locks
        self.session_id = session_id

    def try_acquire(self) -> bool:
        return self._locks.try_acquire(self.session_id)

    def release(self) -> None:
        self._locks.release(self.session_id)


def listen_streams(conninfo: str, schema: str, owner: str, callback: StreamListener) -> Callable[[], None]:
    """Start a thread calling ``callback(session_id, stream_id)`` for each stream another store
    than ``owner`` opens in ``schema``; returns the function that stops it (and waits)."""
    stop = threading.Event()
    ready = threading.Event()
    failure: list[BaseException] = []

    def listen_once() -> None:
        """Listen on one connection until told to stop or the connection breaks."""
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(stream_channel(schema))))
            ready.set()
            while not stop.is_set():
                for note in conn.notifies(timeout=LISTEN_TICK):
                    _deliver(note.payload, owner, callback)

    def run() -> None:
        while not stop.is_set():
            try:
                listen_once()
            except BaseException as exc:
                if not ready.is_set():  # the first connection failed: the caller hears why
                    failure.append(exc)
                    ready.set()
                    return
                if not isinstance(exc, psycopg.Error):
                    raise
                # A database restart or a dropped connection: listen again (streams opened in
                # between are not announced; their clients can still resume them).
                logger.warning("the PostgreSQL stream listener lost its connection (%s); reconnecting", exc)
                stop.wait(RECONNECT_DELAY)

    thread = threading.Thread(target=run, name=f"think-pg-listen-{schema}", daemon=True)
    thread.start()
    ready.wait()
    if failure:
        raise failure[0]

    def stop_listening() -> None:
        stop.set()
        thread.join()

    return stop_listening


def _deliver(payload: str, owner: str, callback: StreamListener) -> None:
    try:
        note = json.loads(payload)
        if note.get("owner") != owner:
            callback(note["session"], note["stream"])
    except Exception:  # one bad note or callback must not end the listener
        logger.exception("handling a stream notification failed")
