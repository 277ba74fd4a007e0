"""A turn's input and the history its model reads, in one transaction: ``write_turn_input``
keeps the history's changes it read for the turn's first ``model_messages``, which then reads
nothing — unless the history was written in between, through any store call, or the cache
moved on; then it reads, and the model sees the write. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._counting import CountingStore
from tests.store.conftest import _backend
from think_core.store import AsyncStore, Store
from think_core.types import UIMessage

S = "s"


def _user(message_id: str, text: str) -> UIMessage:
    return UIMessage(id=message_id, role="user", parts=[{"type": "text", "text": text}])


@pytest.fixture(params=["sqlite-file", "postgresql"])
def counting(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CountingStore]:
    backend: Store = _backend(request.param, tmp_path, request)()
    try:
        yield CountingStore(backend)
    finally:
        backend.close()


def _texts(messages: list[object]) -> list[str]:
    return [str(getattr(m, "content", m)) for m in messages]


async def test_the_first_read_after_the_input_costs_nothing(counting: CountingStore) -> None:
    db = AsyncStore(counting)  # type: ignore[arg-type]
    await db.write_turn_input(S, lambda store: store.append_messages(S, [_user("u1", "first")]))
    counting.recording = True
    history = await db.model_history.model_messages(S)
    assert "first" in " ".join(_texts(history))
    assert "history_changes" not in counting.calls  # the input's transaction read it
    # The next turn: its own input, read with it again; a second read without a write reads.
    await db.write_turn_input(S, lambda store: store.append_messages(S, [_user("u2", "second")]))
    counting.calls.clear()
    history = await db.model_history.model_messages(S)
    assert "second" in " ".join(_texts(history)) and "history_changes" not in counting.calls
    await db.model_history.model_messages(S)
    assert counting.calls["history_changes"] == 1


async def test_a_write_in_between_is_read_by_the_model(counting: CountingStore) -> None:
    db = AsyncStore(counting)  # type: ignore[arg-type]
    await db.write_turn_input(S, lambda store: store.append_messages(S, [_user("u1", "first")]))
    await db.upsert_message(S, _user("u1", "first, edited"))  # e.g. a hook's write before the model call
    counting.recording = True
    history = await db.model_history.model_messages(S)
    assert "first, edited" in " ".join(_texts(history))
    assert counting.calls["history_changes"] == 1


async def test_a_write_in_an_atomic_block_in_between_is_read_by_the_model(counting: CountingStore) -> None:
    db = AsyncStore(counting)  # type: ignore[arg-type]
    await db.write_turn_input(S, lambda store: store.append_messages(S, [_user("u1", "first")]))
    await db.atomic(lambda store: store.append_messages(S, [_user("u2", "added")]), session_id=S)
    history = await db.model_history.model_messages(S)
    assert "added" in " ".join(_texts(history))
