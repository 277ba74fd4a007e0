"""A long conversation's turns: the history is kept as model messages between turns and brought
up to date from the store (``Store.history_changes``), so a turn reads only what changed — and
still sends exactly the stored history, whatever another process wrote in between."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.support.messages import msg
from think_core import ScriptedModel, Think
from think_core.messages import to_model_messages
from think_core.models.base import AssistantMessage, ModelRequest, UserMessage
from think_core.store import HistoryChanges, HistoryMark, SQLiteStore
from think_core.store.aio import AsyncStore, open_store
from think_core.store.history_cache import HistoryCache
from think_core.types import StepContext, UIMessage

S = "s"


def spy_on_changes(db: AsyncStore) -> list[tuple[bool, int, int]]:
    """Record what each history_changes read brought: (whole, appended, updated) — read on its
    own, or with the turn's input (``write_turn_input``, handed to the cache as prefetched)."""
    seen: list[tuple[bool, int, int]] = []
    read = db.history_changes
    prefetched = db.model_history.prefetched

    def note(changes: HistoryChanges) -> HistoryChanges:
        seen.append((changes.whole, len(changes.appended), len(changes.updated)))
        return changes

    async def recorded(session_id: str, since: HistoryMark | None = None) -> HistoryChanges:
        return note(await read(session_id, since))

    def recorded_ahead(session_id: str, since: HistoryMark | None, changes: HistoryChanges) -> None:
        prefetched(session_id, since, note(changes))

    db.history_changes = recorded  # type: ignore[method-assign]
    db.model_history.prefetched = recorded_ahead  # type: ignore[method-assign]
    return seen


def sent_as_stored(model: ScriptedModel, db: str) -> None:
    """The last request carried the stored history up to the question (its answer came after)."""
    store = open_store(db)
    try:
        assert model.requests[-1].messages == to_model_messages(store.history(S)[:-1])
    finally:
        store.close()


async def test_a_turn_reads_only_the_messages_written_since_the_last_turn(db: str) -> None:
    model = ScriptedModel(["one", "two", "three"])
    async with Think(model, store=db, load_entrypoints=False) as agent:
        session = agent.session(S)
        await session.add_messages([msg(f"m{i}", role="user" if i % 2 == 0 else "assistant") for i in range(50)])
        seen = spy_on_changes(agent.db)
        await session.chat("first")
        await session.chat("second")
        await session.chat("third")
        # The session was made by this process, empty: even the first turn reads by revision
        # (the 51 messages written since), then the answer before and the question.
        assert seen == [(False, 51, 0), (False, 2, 0), (False, 2, 0)]
        sent_as_stored(model, db)


def spy_on_opening_reads(db: AsyncStore) -> list[str]:
    """Record the opening's reads of what a session may hold (its submissions, its state)."""
    reads: list[str] = []

    def spied(name: str, read: Any) -> Any:
        def spy(*args: Any, **kwargs: Any) -> Any:
            reads.append(name)
            return read(*args, **kwargs)
        return spy

    for name in ("list_submissions", "get_state"):
        setattr(db.sync, name, spied(name, getattr(db.sync, name)))
    return reads


async def test_a_session_this_process_made_reads_by_revision_from_its_first_turn(db: str) -> None:
    model = ScriptedModel(["made here", "made elsewhere"])
    other = open_store(db)  # another process, which made a session first
    try:
        other.append_messages("elsewhere", [msg("old", "written before this process")])
        async with Think(model, store=db, load_entrypoints=False) as agent:
            reads = spy_on_opening_reads(agent.db)
            seen = spy_on_changes(agent.db)
            await agent.session(S).chat("first")
            # Made by the opening: nothing to recover or continue, and the history read since
            # revision 0 (the question alone), not whole with its compactions.
            assert (reads, seen) == ([], [(False, 1, 0)])
            await agent.session("elsewhere").chat("second")
            assert reads == ["list_submissions", "get_state"]
            assert seen[1:] == [(True, 2, 0)]
            assert model.requests[-1].messages == to_model_messages(other.history("elsewhere")[:-1])
    finally:
        other.close()


async def test_what_another_store_writes_between_turns_is_in_the_next_request(db: str) -> None:
    model = ScriptedModel(["one", "two", "three", "four", "five"])
    other = open_store(db)  # another process on the same database
    try:
        async with Think(model, store=db, load_entrypoints=False) as agent:
            session = agent.session(S)
            seen = spy_on_changes(agent.db)
            await session.chat("first")
            other.append_messages(S, [msg("elsewhere", "written by another process")])
            question, answer = other.list_messages(S)[:2]
            other.upsert_message(S, msg(question.id, "first, edited"))  # a message the last turn sent
            other.upsert_message(S, UIMessage(id=answer.id, role="assistant", parts=[{"type": "text", "text": "edited"}]))
            await session.chat("second")
            # The answer (stored after the last read), the message elsewhere, the question; the first one edited.
            assert seen[-1] == (False, 3, 1)
            sent_as_stored(model, db)
            assert model.requests[-1].messages[:2] == [UserMessage(content="first, edited"), AssistantMessage(text="edited")]
            stored = other.list_messages(S)
            other.add_compaction(S, stored[0].id, stored[2].id, "the start")
            await session.chat("third")
            assert seen[-1][0]  # a compaction since: read whole
            sent_as_stored(model, db)
            other.delete_messages(S, [other.list_messages(S)[-1].id])
            await session.chat("fourth")
            assert seen[-1][0]
            sent_as_stored(model, db)
            other.clear_messages(S)
            await session.chat("fifth")
            assert model.requests[-1].messages == [UserMessage(content="fifth")]
    finally:
        other.close()


async def test_the_cache_equals_the_stored_history_after_every_kind_of_write() -> None:
    db = AsyncStore(SQLiteStore(":memory:"))
    cache = HistoryCache(db)
    store = db.sync

    async def check(up_to: str | None = None) -> None:
        history = store.history(S)
        ids = [m.id for m in history]
        if up_to in ids:  # else all of it (say, a message compacted away)
            history = history[: ids.index(up_to) + 1]
        assert await cache.model_messages(S, up_to) == to_model_messages(history)

    await check()
    store.append_messages(S, [msg(x, role="user" if i % 2 == 0 else "assistant") for i, x in enumerate("abcdef")])
    await check()
    await check(up_to="c")
    store.upsert_message(S, UIMessage(id="b", role="assistant", parts=[
        {"type": "text", "text": "step one"}, {"type": "step-start"}, {"type": "text", "text": "step two"}]))
    await check()  # one message, two model messages now: the runs after it moved
    await check(up_to="d")
    cid = store.add_compaction(S, "a", "b", "a and b")
    await check()
    store.upsert_message(S, msg("a", "rewritten under the summary"))  # covered: not in the history
    store.append_messages(S, [msg("g")])
    await check()
    await check(up_to=f"compaction_{cid}")
    await check(up_to="gone")  # not in the history: all of it
    store.delete_messages(S, ["c"])
    await check()
    store.clear_messages(S)
    await check()


async def test_the_cache_keeps_its_busiest_sessions_and_reads_a_dropped_one_whole() -> None:
    db = AsyncStore(SQLiteStore(":memory:"))
    cache = HistoryCache(db, max_sessions=2, max_messages=5)
    seen = spy_on_changes(db)
    for session_id in ("one", "two", "three"):
        db.sync.append_messages(session_id, [msg("a"), msg("b")])
        await cache.model_messages(session_id)
    await cache.model_messages("three")
    await cache.model_messages("one")  # dropped for "three": read whole again
    assert [whole for whole, _, _ in seen] == [True, True, True, False, True]
    db.sync.append_messages("big", [msg(str(i)) for i in range(6)])  # over max_messages alone: kept alone
    await cache.model_messages("big")
    await cache.model_messages("big")
    assert [whole for whole, _, _ in seen][-2:] == [True, False]


async def test_a_message_that_cannot_be_converted_leaves_the_cache_as_it_was() -> None:
    db = AsyncStore(SQLiteStore(":memory:"))
    cache = HistoryCache(db)
    db.sync.append_messages(S, [msg("a")])
    before = await cache.model_messages(S)
    db.sync.append_messages(S, [UIMessage(id="bad", role="user", parts=[{"type": "file", "mediaType": "image/png"}])])
    with pytest.raises(ValueError, match="url"):
        await cache.model_messages(S)
    db.sync.delete_messages(S, ["bad"])
    assert await cache.model_messages(S) == before


def test_a_list_of_message_objects_is_copied_and_anything_else_validated() -> None:
    history: list[Any] = [UserMessage(content="hi"), AssistantMessage(text="hello")]
    request = ModelRequest(messages=history)
    assert request.messages == history and request.messages is not history
    assert request.messages[0] is history[0]
    assert ModelRequest(messages=[{"role": "user", "content": "hi"}]).messages == [UserMessage(content="hi")]
    with pytest.raises(ValidationError):
        ModelRequest(messages=[*history, {"role": "robot"}])
    with pytest.raises(ValidationError):
        StepContext(session=None, request_id="r", step_number=0, steps=[], model=None, messages=[*history, 42])
