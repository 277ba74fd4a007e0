"""A ``Store`` wrapper counting what a request costs the store (for the benchmarks only).

:class:`CountingStore` counts the calls of each store method (and when they returned, and the
time spent in them) while ``recording``; with :func:`count_pg_statements` active it also counts
the statements each call sent to PostgreSQL (every ``execute`` is a round trip to the server:
``BEGIN``, the statements, ``COMMIT``, a ``NOTIFY``), attributed to the store method running on
that thread. The orphan watch's sweep (one ``unfinished_submissions`` and one
``submission_owner`` every 0.5 s, whatever the requests do) is not a request's:
:meth:`CountingStore.request_calls` leaves it out.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

_current = threading.local()  # the CountingStore method running on this thread, if any

#: Methods that are where a call runs, not store calls: the calls they run are counted.
_NOT_CALLS = frozenset({"run_without_waiting", "checkpoint"})


class CountingStore:
    """Counts the calls of the wrapped store's methods; everything else is the wrapped store's."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.recording = False
        self.calls: collections.Counter[str] = collections.Counter()
        self.statements: collections.Counter[str] = collections.Counter()  # PostgreSQL round trips, by method
        self.returned: dict[str, float] = {}
        self.spent: collections.Counter[str] = collections.Counter()  # seconds, by method

    def clear(self) -> None:
        self.calls.clear()
        self.statements.clear()
        self.returned.clear()
        self.spent.clear()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not callable(value) or name.startswith("_") or name in _NOT_CALLS:
            return value

        @functools.wraps(value)
        def counted(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            outer = getattr(_current, "method", None)
            if outer is not None and getattr(_current, "group", None) is not None:
                _current.group.append(name)  # a call inside atomic(): part of its transaction
            _current.method = (self, name) if outer is None else outer
            try:
                return value(*args, **kwargs)
            finally:
                _current.method = outer
                if self.recording and outer is None:
                    self.calls[name] += 1
                    self.returned[name] = time.perf_counter()
                    self.spent[name] += self.returned[name] - start

        return counted

    @contextlib.contextmanager
    def atomic(self, session_id: str | None = None, *, read_only: bool = False) -> Iterator[None]:
        """The wrapped store's ``atomic``, counted as one call (one transaction) named after the
        calls made in it: ``atomic(a+b)``."""
        if getattr(_current, "method", None) is not None:  # nested: part of the outer one
            with self._store.atomic(session_id, read_only=read_only):
                yield
            return
        start, key, group = time.perf_counter(), f"atomic#{id(object())}", []
        _current.method, _current.group = (self, key), group
        try:
            with self._store.atomic(session_id, read_only=read_only):
                yield
        finally:
            _current.method = _current.group = None
            if self.recording:
                name = f"atomic({'+'.join(group)})"
                self.calls[name] += 1
                self.returned[name] = time.perf_counter()
                self.spent[name] += self.returned[name] - start
                if key in self.statements:
                    self.statements[name] += self.statements.pop(key)

    def request_calls(self) -> tuple[dict[str, int], dict[str, int]]:
        """``(calls, statements)`` by method, without the orphan watch's sweeps."""
        calls, statements = dict(self.calls), dict(self.statements)
        sweeps = calls.pop("unfinished_submissions", 0)
        statements.pop("unfinished_submissions", 0)
        calls["submission_owner"] = calls.get("submission_owner", 0) - sweeps  # (no statement: the store's own)
        return {k: v for k, v in calls.items() if v}, {k: v for k, v in statements.items() if v}


@contextlib.contextmanager
def count_pg_statements(store: CountingStore) -> Iterator[None]:
    """Count every statement psycopg sends (``execute``, ``executemany``) while ``store`` is
    recording, by the store method running on the sending thread (``(outside store calls)``: a
    session lock's, taken through the lock object the store handed out)."""
    import psycopg

    def _note_statement() -> None:
        method = getattr(_current, "method", None)
        if store.recording:
            store.statements[method[1] if method is not None else "(outside store calls)"] += 1

    originals = {name: getattr(psycopg.Cursor, name) for name in ("execute", "executemany")}

    def wrap(original: Any) -> Any:
        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            _note_statement()
            return original(self, *args, **kwargs)

        return counted

    for name, original in originals.items():
        setattr(psycopg.Cursor, name, wrap(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(psycopg.Cursor, name, original)
