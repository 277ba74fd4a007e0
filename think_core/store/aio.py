"""The store as the engine awaits it, and how a store is named.

:class:`AsyncStore` runs a store's methods on the store's own worker thread, so a write waiting
for another process's lock on the SQLite file (or a long history read) never stalls the event
loop. :func:`open_store` turns ``store=`` / ``--db`` into a store.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .base import Store, is_postgres_url
from .sqlite import SQLiteStore

__all__ = ["AsyncStore", "is_postgres_url", "open_store"]

T = TypeVar("T")


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
    """

    def __init__(self, store: Store) -> None:
        self.sync = store
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        # An in-memory database cannot be locked by anyone else: call it inline (no thread hop).
        self._inline = bool(getattr(store, "in_memory", False))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.sync, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._on_store_thread(functools.partial(method, *args, **kwargs))

        call.__name__ = name
        return call

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(store, *args, **kwargs)`` on the store's thread: several store calls that
        belong together, without a thread hop each."""
        return await self._on_store_thread(functools.partial(function, self.sync, *args, **kwargs))

    async def _on_store_thread(self, call: Callable[[], T]) -> T:
        if self._inline:
            return call()
        if self._closed:
            raise RuntimeError("the store is closed")
        if self._executor is None:
            workers = int(getattr(self.sync, "max_concurrency", 1))
            self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="think-store")
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    @property
    def closed(self) -> bool:
        return self._closed

    def shutdown(self) -> None:
        """Stop the worker thread (after the calls in flight); later calls raise RuntimeError."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
