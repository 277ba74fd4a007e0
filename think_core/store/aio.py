"""The store as the engine awaits it, and how a store is named.

:class:`AsyncStore` runs a store's methods on the store's own worker thread, so a write waiting
for another process's lock on the SQLite file (or a long history read) never stalls the event
loop; a brief call on a SQLite file that need not wait runs on the loop, which costs less than
the hop. :func:`open_store` turns ``store=`` / ``--db`` into a store.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from ..errors import StoreUnavailable
from ..types import UIMessage
from .base import (
    HistoryChanges,
    HistoryMark,
    JournalEntry,
    MessageWindow,
    Store,
    StreamInfo,
    Submission,
    UnfinishedSubmission,
    is_postgres_url,
)
from .history_cache import HistoryCache
from .on_loop import BRIEF_CALLS, LoopCalls, RunsWithoutWaiting
from .shared import SharedSessions
from .sqlite import SQLiteStore
from .threads import CallGroups, StoreThreads

__all__ = ["AsyncStore", "is_postgres_url", "open_store"]

T = TypeVar("T")

logger = logging.getLogger("think.store")

#: The store calls that write a session's history (its first argument): what was read of it
#: ahead is stale after them (see ``HistoryCache.prefetched``).
_HISTORY_WRITES = frozenset({
    "append_messages", "upsert_message", "delete_messages", "clear_messages", "add_compaction",
    "apply_submission_messages", "store_submission_answer", "requeue_submission",
})

#: Seconds a store call is retried while the database is unreachable (see ``AsyncStore.retry_for``).
DEFAULT_RETRY_FOR = 15.0


def open_store(spec: Store | str | os.PathLike[str] | None = None) -> Store:
    """A store from a spec: ``None`` → an in-memory SQLite store; a ``postgresql://`` (or
    ``postgres://``) URL → :class:`~think_core.store.postgres.PostgresStore` (the extra
    ``postgres``); a path (or ``":memory:"`` or a ``file:`` URI) → :class:`SQLiteStore`; a
    store → itself."""
    if spec is None:
        return SQLiteStore(":memory:")
    if isinstance(spec, str) and is_postgres_url(spec):
        from .postgres import PostgresStore  # imported on demand: psycopg is an optional extra

        return PostgresStore(spec)
    if isinstance(spec, (str, os.PathLike)):
        return SQLiteStore(spec)
    if isinstance(spec, Store):
        return spec
    raise TypeError(f"cannot open a store from {spec!r}")


class AsyncStore:
    """A store's methods as coroutines that run on the store's own worker thread.

    The engine awaits the store through this facade, so a write waiting for another process's
    lock on the SQLite file (or a long history read) never stalls the event loop, and with it
    every other session's stream. One thread for a store on one connection (SQLite serialises
    it anyway: more threads would only contend for its lock); as many as a pooled store's
    ``max_concurrency`` (PostgreSQL), whose calls do run in parallel.

    Where a call runs: an in-memory store's, inline (nobody else can lock it). A SQLite file's
    brief calls (a few indexed statements, see :mod:`~think_core.store.on_loop`), on the event
    loop too while one session at a time makes them, the connection is free and no other
    connection holds the file's write lock: the hop to the thread and back costs more than
    such a call. Otherwise, and always for a call that may read a whole history, stream or
    table, on the thread — behind any call already queued there, so a later call never
    overtakes an earlier one.
    """

    def __init__(self, store: Store) -> None:
        self.sync = store
        #: Seconds a call whose database is unreachable is tried again before StoreUnavailable is
        #: raised (a PostgreSQL restart takes a few).
        self.retry_for = DEFAULT_RETRY_FOR
        self._threads: StoreThreads | None = None
        self._closed = False
        # An in-memory database cannot be locked by anyone else: call it inline (no thread hop).
        self._inline = bool(getattr(store, "in_memory", False))
        # A SQLite file: a brief call runs inline too when that costs no wait (see on_loop).
        self._on_loop: LoopCalls | None = (
            LoopCalls(store) if not self._inline and hasattr(store, "run_without_waiting") else None  # type: ignore[arg-type]
        )
        #: Calls sent to the store's thread that have not returned: while there are any, later
        #: calls queue behind them rather than overtake them inline.
        self._queued = 0
        self._checkpointing = False
        #: The store as :class:`SharedSessions` when it locks sessions across processes, else None
        #: (checked once: a protocol ``isinstance`` costs more than the rest of opening a session).
        self.shared: SharedSessions | None = store if isinstance(store, SharedSessions) else None
        #: Recent sessions' histories as model messages, brought up to date by history_changes.
        self.model_history = HistoryCache(self)

    async def _call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        name = method.__name__
        if name in _HISTORY_WRITES:
            self.model_history.invalidate(args[0])
        brief = name in BRIEF_CALLS
        call = functools.partial(method, *args, **kwargs)
        return await self._on_store_thread(call, brief=brief, session_id=args[0] if brief else None)

    # -- the Store protocol, awaited (one method each, so every call is type-checked) ----------
    async def ensure_session(self, session_id: str) -> bool:
        return await self._call(self.sync.ensure_session, session_id)

    async def list_messages(self, session_id: str) -> list[UIMessage]:
        return await self._call(self.sync.list_messages, session_id)

    async def get_message(self, session_id: str, message_id: str) -> UIMessage | None:
        return await self._call(self.sync.get_message, session_id, message_id)

    async def message_window(
        self, session_id: str, message_ids: Iterable[str] = (), *, before: int = 0, last: int = 0
    ) -> MessageWindow:
        return await self._call(self.sync.message_window, session_id, list(message_ids), before=before, last=last)

    async def append_messages(self, session_id: str, messages: Sequence[UIMessage]) -> list[UIMessage]:
        return await self._call(self.sync.append_messages, session_id, messages)

    async def upsert_message(self, session_id: str, message: UIMessage) -> None:
        return await self._call(self.sync.upsert_message, session_id, message)

    async def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> int:
        return await self._call(self.sync.delete_messages, session_id, message_ids)

    async def clear_messages(self, session_id: str) -> None:
        return await self._call(self.sync.clear_messages, session_id)

    async def add_compaction(self, session_id: str, from_message_id: str, to_message_id: str, summary: str) -> int:
        return await self._call(self.sync.add_compaction, session_id, from_message_id, to_message_id, summary)

    async def history(self, session_id: str) -> list[UIMessage]:
        return await self._call(self.sync.history, session_id)

    async def history_changes(self, session_id: str, since: HistoryMark | None = None) -> HistoryChanges:
        # Brief when it reads what changed since a mark; without one it reads the whole history.
        call = functools.partial(self.sync.history_changes, session_id, since)
        return await self._on_store_thread(call, brief=since is not None, session_id=session_id)

    async def create_submission(
        self,
        session_id: str,
        messages: Sequence[UIMessage],
        *,
        submission_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[Submission, bool]:
        return await self._call(
            self.sync.create_submission,
            session_id,
            messages,
            submission_id=submission_id,
            idempotency_key=idempotency_key,
            metadata=metadata,
        )

    async def get_submission(self, session_id: str, submission_id: str) -> Submission | None:
        return await self._call(self.sync.get_submission, session_id, submission_id)

    async def get_submission_by_key(self, session_id: str, idempotency_key: str) -> Submission | None:
        return await self._call(self.sync.get_submission_by_key, session_id, idempotency_key)

    async def submissions_by_key_prefix(
        self, session_id: str, prefix: str, limit: int | None = None
    ) -> list[Submission]:
        return await self._call(self.sync.submissions_by_key_prefix, session_id, prefix, limit)

    async def list_submissions(
        self, session_id: str, status: str | Iterable[str] | None = None, limit: int | None = None
    ) -> list[Submission]:
        return await self._call(self.sync.list_submissions, session_id, status, limit)

    async def claim_next_submission(
        self, session_id: str, *, in_order: bool = False, lease: float | None = None
    ) -> Submission | None:
        return await self._call(self.sync.claim_next_submission, session_id, in_order=in_order, lease=lease)

    async def heartbeat_submission(self, session_id: str, submission_id: str) -> bool:
        return await self._call(self.sync.heartbeat_submission, session_id, submission_id)

    async def store_submission_answer(
        self, session_id: str, submission_id: str, message: UIMessage | None, status: str, error: str | None = None
    ) -> bool:
        return await self._call(self.sync.store_submission_answer, session_id, submission_id, message, status, error)

    async def apply_submission_messages(
        self, session_id: str, submission_id: str, *, replacing_from: str | None = None
    ) -> list[UIMessage]:
        return await self._call(
            self.sync.apply_submission_messages, session_id, submission_id, replacing_from=replacing_from
        )

    async def mark_submission_applied(self, session_id: str, submission_id: str) -> bool:
        return await self._call(self.sync.mark_submission_applied, session_id, submission_id)

    async def requeue_submission(self, session_id: str, submission_id: str) -> bool:
        return await self._call(self.sync.requeue_submission, session_id, submission_id)

    async def finish_submission(
        self, session_id: str, submission_id: str, status: str, error: str | None = None
    ) -> bool:
        return await self._call(self.sync.finish_submission, session_id, submission_id, status, error)

    async def journal_submission(
        self, session_id: str, submission_id: str, kind: str, key: str, data: dict[str, Any]
    ) -> bool:
        return await self._call(self.sync.journal_submission, session_id, submission_id, kind, key, data)

    async def submission_journal(self, session_id: str, submission_id: str) -> list[JournalEntry]:
        return await self._call(self.sync.submission_journal, session_id, submission_id)

    async def retake_stale_submissions(
        self, session_id: str, *, stale_after: float | None = None, lease: float | None = None
    ) -> list[Submission]:
        return await self._call(self.sync.retake_stale_submissions, session_id, stale_after=stale_after, lease=lease)

    async def retake_submission(
        self,
        session_id: str,
        submission_id: str,
        *,
        if_owner: str | None,
        if_heartbeat_at: float | None,
        lease: float | None = None,
    ) -> Submission | None:
        return await self._call(
            self.sync.retake_submission,
            session_id,
            submission_id,
            if_owner=if_owner,
            if_heartbeat_at=if_heartbeat_at,
            lease=lease,
        )

    async def running_submissions(self) -> list[Submission]:
        return await self._call(self.sync.running_submissions)

    async def pending_session_ids(self) -> list[str]:
        return await self._call(self.sync.pending_session_ids)

    async def unfinished_submissions(self) -> list[UnfinishedSubmission]:
        return await self._call(self.sync.unfinished_submissions)

    async def open_stream(
        self, session_id: str, stream_id: str, *, continuation: bool = False, message_ids: Sequence[str] | None = None
    ) -> StreamInfo:
        return await self._call(
            self.sync.open_stream, session_id, stream_id, continuation=continuation, message_ids=message_ids
        )

    async def append_stream_chunks(
        self, session_id: str, stream_id: str, first_seq: int, bodies: Sequence[str]
    ) -> None:
        return await self._call(self.sync.append_stream_chunks, session_id, stream_id, first_seq, bodies)

    async def truncate_stream(self, session_id: str, stream_id: str, length: int) -> None:
        return await self._call(self.sync.truncate_stream, session_id, stream_id, length)

    async def finish_stream(self, session_id: str, stream_id: str, status: str) -> bool:
        return await self._call(self.sync.finish_stream, session_id, stream_id, status)

    async def get_stream(self, session_id: str, stream_id: str | None = None) -> StreamInfo | None:
        return await self._call(self.sync.get_stream, session_id, stream_id)

    async def stream_chunks(self, session_id: str, stream_id: str, start: int = 0) -> list[str]:
        return await self._call(self.sync.stream_chunks, session_id, stream_id, start)

    async def get_state(self, session_id: str, key: str) -> Any:
        return await self._call(self.sync.get_state, session_id, key)

    async def set_state(self, session_id: str, key: str, value: Any) -> None:
        return await self._call(self.sync.set_state, session_id, key, value)

    async def atomic(
        self, work: Callable[[Store], T], *, session_id: str | None = None, read_only: bool = False,
        brief: bool = False,
    ) -> T:
        """``work(store)`` on the store's thread, its store calls one transaction (see
        :meth:`Store.atomic`): they commit together, or — ``work`` raising — none does. Retried
        whole while the database is unreachable (nothing of a failed attempt was committed).
        ``brief``: ``work`` runs a few indexed statements however long the session is, so on a
        SQLite file it may run on the event loop when it need not wait for a lock."""
        store = self.sync
        if not read_only:
            self.model_history.invalidate(session_id)

        def atomically() -> T:
            with store.atomic(session_id, read_only=read_only):
                return work(store)

        return await self._on_store_thread(atomically, brief=brief, session_id=session_id)

    async def write_turn_input(self, session_id: str, write: Callable[[Store], object]) -> None:
        """``write(store)`` — a turn's input into the history — and the history's changes since
        the cached one, as the turn's model will read them, in one transaction: the changes are
        kept for the turn's first read (``HistoryCache.prefetched``), which costs no round trip."""
        history = self.model_history
        since = history.mark(session_id)

        def work(store: Store) -> HistoryChanges:
            write(store)
            return store.history_changes(session_id, since)

        # Brief unless the history is read whole (no mark: not cached in this process).
        changes = await self.atomic(work, session_id=session_id, brief=since is not None)
        history.prefetched(session_id, since, changes)

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(store, *args, **kwargs)`` on the store's thread: several store calls that
        belong together, without a thread hop each. Each of its store calls commits as it would
        alone, or later with calls queued beside it (a SQLite store's group commit); when
        ``function`` raises, whether its earlier calls' writes stay is not promised: use
        :meth:`atomic` for all or nothing."""
        self.model_history.invalidate(None)
        # (on the thread: its calls are several transactions, see run_without_waiting)
        return await self._on_store_thread(functools.partial(function, self.sync, *args, **kwargs))

    async def _on_store_thread(
        self, call: Callable[[], T], *, brief: bool = False, session_id: str | None = None
    ) -> T:
        """``call()`` on the store's thread; ``brief`` (one transaction of a few indexed
        statements, for ``session_id``), on the event loop when that costs no wait."""
        try:
            return await self._once(call, brief, session_id)
        except StoreUnavailable as exc:
            return await self._retried(call, exc)

    async def _once(self, call: Callable[[], T], brief: bool = False, session_id: str | None = None) -> T:
        if self._inline:
            return call()
        if self._closed:
            raise RuntimeError("the store is closed")
        on_loop = self._on_loop
        if brief and on_loop is not None and not self._queued:  # (queued calls are not overtaken)
            done, result = on_loop.run(call, session_id)
            if done:
                if on_loop.store.checkpoint_due and not self._checkpointing:
                    self._checkpoint(on_loop.store)
                return result  # type: ignore[return-value]
        threads = self._store_threads()
        self._queued += 1
        try:
            return await threads.run(call)
        finally:
            self._queued -= 1

    def _store_threads(self) -> StoreThreads:
        if self._threads is None:
            workers = int(getattr(self.sync, "max_concurrency", 1))
            # One connection: the calls queued behind each other commit together.
            groups = self.sync if workers == 1 and isinstance(self.sync, CallGroups) else None
            self._threads = StoreThreads(workers, groups=groups)
        return self._threads

    def _checkpoint(self, file: RunsWithoutWaiting) -> None:
        """The write-ahead log's checkpoint that calls run inline left due, on the store's
        thread (it syncs the file); nobody waits for it."""
        self._checkpointing = True

        def checkpointed(done: asyncio.Future[None]) -> None:
            self._checkpointing = False
            if not done.cancelled() and done.exception() is not None:  # the next one copies what this did not
                logger.warning("checkpointing the store's write-ahead log failed", exc_info=done.exception())

        self._store_threads().post(file.checkpoint, asyncio.get_running_loop()).add_done_callback(checkpointed)

    async def _retried(self, call: Callable[[], T], first: StoreUnavailable) -> T:
        """A call whose database went away before it committed (a restart, a failover), run
        again on a fresh connection until it goes through or :attr:`retry_for` seconds passed."""
        logger.warning("the store is unavailable (%s); retrying for up to %g s", first, self.retry_for)
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(StoreUnavailable),
            stop=stop_after_delay(self.retry_for),
            wait=wait_exponential(multiplier=0.05, max=2.0),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                result = await self._once(call)
        logger.warning("the store is available again")
        return result

    @property
    def closed(self) -> bool:
        return self._closed

    def shutdown(self) -> None:
        """Stop the worker thread (after the calls in flight); later calls raise RuntimeError."""
        self._closed = True
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None
