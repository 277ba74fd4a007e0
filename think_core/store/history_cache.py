"""The model-message form of recent sessions' histories, kept between turns.

A turn sends the model the whole history. Reading all of it from the store and converting it
to model messages on every turn costs as much as the conversation is long (about 180 ms at
10,000 messages); this cache keeps each recent session's history as model messages and brings
it up to date with :meth:`~think_core.store.base.Store.history_changes`: one indexed read of
the messages written since the last turn, and only those converted. A delete, a clear or a
compaction since (or a session not in the cache) reads the history whole, as every turn did
before. The store's revisions say what changed, so a history another process wrote to (two
servers on one PostgreSQL database) is never served stale.

The model messages are shared by a session's turns: a plugin changing what the model is sent
returns new messages from its hook (as the hooks document), it never changes one in place.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from ..messages import to_model_messages
from ..models.base import ModelMessage
from ..types import UIMessage
from .base import HistoryChanges, HistoryMark

__all__ = ["HistoryCache"]


class HistoryReader(Protocol):
    """Where the cache reads what changed (the engine's :class:`~think_core.store.aio.AsyncStore`)."""

    async def history_changes(self, session_id: str, since: HistoryMark | None = None) -> HistoryChanges: ...

#: Sessions kept (least recently used dropped first), and the stored messages kept in all: a
#: server with many chats keeps its busiest ones, in bounded memory.
MAX_SESSIONS = 64
MAX_MESSAGES = 50_000


class _SessionHistory:
    """One session's history as model messages: ``flat`` in order, the stored message each
    run of it comes from (``ids``; ``ends[i]`` is where message ``i``'s run ends in ``flat``)."""

    __slots__ = ("mark", "ids", "ends", "flat", "positions")

    def __init__(self, mark: HistoryMark) -> None:
        self.mark = mark
        self.ids: list[str] = []
        self.ends: list[int] = []
        self.flat: list[ModelMessage] = []
        self.positions: dict[str, int] = {}

    def append(self, message: UIMessage, converted: list[ModelMessage]) -> None:
        self.positions[message.id] = len(self.ids)
        self.ids.append(message.id)
        self.flat.extend(converted)
        self.ends.append(len(self.flat))

    def replace(self, index: int, converted: list[ModelMessage]) -> None:
        """Message ``index`` rewritten in place (an answer continued, a call answered): its run
        replaced and the runs after it moved (it is nearly always the last message)."""
        start = self.ends[index - 1] if index else 0
        delta = len(converted) - (self.ends[index] - start)
        self.flat[start : self.ends[index]] = converted
        if delta:
            for i in range(index, len(self.ends)):
                self.ends[i] += delta

    def up_to(self, message_id: str | None) -> list[ModelMessage]:
        """The model messages up to stored message ``message_id``, inclusive (all of them when
        it is ``None`` or not in the history, e.g. compacted away); a new list."""
        index = self.positions.get(message_id) if message_id is not None else None
        return self.flat[: self.ends[index]] if index is not None else list(self.flat)


def _converted(messages: list[UIMessage]) -> list[list[ModelMessage]]:
    # Each stored message converts on its own: to_model_messages keeps no state from one message
    # to the next (tests/engine/test_long_history.py checks the cache against a whole conversion).
    return [to_model_messages((message,)) for message in messages]


class HistoryCache:
    """The model messages of recent sessions' histories, kept up to date from the store."""

    def __init__(self, db: HistoryReader, *, max_sessions: int = MAX_SESSIONS, max_messages: int = MAX_MESSAGES) -> None:
        self._db = db
        self._sessions: OrderedDict[str, _SessionHistory] = OrderedDict()
        self._total = 0  # stored messages kept, over all sessions
        self.max_sessions = max_sessions
        self.max_messages = max_messages
        # Changes read ahead in another transaction (a durable turn's input, see ``prefetched``),
        # by session: (the mark they were read since, the changes).
        self._prefetched: dict[str, tuple[HistoryMark | None, HistoryChanges]] = {}

    def mark(self, session_id: str) -> HistoryMark | None:
        """Where the cached history of ``session_id`` stands (``None``: not cached): what a
        read ahead of :meth:`prefetched` reads the changes since."""
        cached = self._sessions.get(session_id)
        return cached.mark if cached is not None else None

    def prefetched(self, session_id: str, since: HistoryMark | None, changes: HistoryChanges) -> None:
        """``history_changes(session_id, since)`` as read by the transaction that wrote a turn's
        input: the turn's first :meth:`model_messages` takes it instead of reading, unless the
        history was written since (:meth:`invalidate`) or the cache moved on."""
        self._prefetched[session_id] = (since, changes)

    def made_empty(self, session_id: str) -> None:
        """``session_id`` was just made, its history empty at revision 0: its first turn reads
        only what was written since (its input) instead of the whole history and its
        compactions. Whatever was cached under its id was of a session deleted since. (A write
        after this one raised the revision, and is read from there.)"""
        dropped = self._sessions.pop(session_id, None)
        if dropped is not None:
            self._total -= len(dropped.ids)
        self._sessions[session_id] = _SessionHistory(HistoryMark(0, 0))
        self._evict()

    def invalidate(self, session_id: str | None) -> None:
        """A write to the history of ``session_id`` (``None``: of any session): what was read
        ahead of it is stale."""
        if not self._prefetched:
            return
        if session_id is None:
            self._prefetched.clear()
        else:
            self._prefetched.pop(session_id, None)

    async def model_messages(self, session_id: str, up_to: str | None = None) -> list[ModelMessage]:
        """The session's history (compactions applied) as model messages, up to stored message
        ``up_to`` inclusive (the whole history when ``None`` or not there): one store read."""
        while True:
            cached = self._sessions.get(session_id)
            since = cached.mark if cached is not None else None
            ahead = self._prefetched.pop(session_id, None)
            if ahead is not None and ahead[0] == since:
                changes = ahead[1]
            else:
                changes = await self._db.history_changes(session_id, since)
            now = self._sessions.get(session_id)
            if (now.mark if now is not None else None) != since:
                continue  # another read of this session moved it on meanwhile: read from there
            before = len(now.ids) if now is not None else 0
            history = self._brought_up_to_date(now, changes)
            self._total += len(history.ids) - before
            self._sessions[session_id] = history
            self._sessions.move_to_end(session_id)
            self._evict()
            return history.up_to(up_to)

    @staticmethod
    def _brought_up_to_date(cached: _SessionHistory | None, changes: HistoryChanges) -> _SessionHistory:
        # Everything is converted before anything changes: a message that cannot be converted
        # (a malformed file part) raises and leaves the cache as it was.
        appended = _converted(changes.appended)
        if changes.whole or cached is None:
            history = _SessionHistory(changes.mark)
            for message, converted in zip(changes.appended, appended, strict=True):
                history.append(message, converted)
            return history
        updated = [(cached.positions.get(m.id), c) for m, c in zip(changes.updated, _converted(changes.updated),
                                                                     strict=True)]
        for index, converted in updated:
            if index is not None:  # None: a message a compaction covers, not in the history
                cached.replace(index, converted)
        for message, converted in zip(changes.appended, appended, strict=True):
            cached.append(message, converted)
        cached.mark = changes.mark
        return cached

    def _evict(self) -> None:
        while len(self._sessions) > 1 and (len(self._sessions) > self.max_sessions or self._total > self.max_messages):
            _, dropped = self._sessions.popitem(last=False)
            self._total -= len(dropped.ids)
