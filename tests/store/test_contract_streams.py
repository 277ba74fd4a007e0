"""The store contract for resumable streams: every backend keeps a running turn's chunks in
order, lets another store instance over the same database read them, and forgets finished
streams when the next one starts."""

from __future__ import annotations

from tests.support.stores import StoreFactory
from think_core.store import Store

S = "session-1"


def test_a_stream_keeps_its_chunks_in_order_and_its_outcome(store: Store) -> None:
    info = store.open_stream(S, "r1", message_ids=["u1"])
    assert (info.status, info.length, info.message_ids, info.continuation) == ("streaming", 0, ["u1"], False)
    store.append_stream_chunks(S, "r1", 0, ['{"type":"start"}', '{"type":"text-delta"}'])
    store.append_stream_chunks(S, "r1", 2, ['{"type":"finish"}'])
    store.append_stream_chunks(S, "r1", 2, ['{"type":"ignored duplicate"}'])  # idempotent by seq
    assert store.stream_chunks(S, "r1") == ['{"type":"start"}', '{"type":"text-delta"}', '{"type":"finish"}']
    assert store.stream_chunks(S, "r1", 2) == ['{"type":"finish"}']
    running = store.get_stream(S)
    assert running is not None and (running.stream_id, running.length) == ("r1", 3)
    assert store.finish_stream(S, "r1", "aborted") is True
    assert store.finish_stream(S, "nope", "aborted") is False
    done = store.get_stream(S, "r1")
    assert done is not None and done.status == "aborted"
    assert store.get_stream("other") is None and store.get_stream(S, "zzz") is None


def test_reopening_keeps_chunks_and_truncating_drops_the_tail(store: Store) -> None:
    store.open_stream(S, "r1", continuation=True)
    store.append_stream_chunks(S, "r1", 0, ["a", "b", "c", "d"])
    store.truncate_stream(S, "r1", 2)
    again = store.open_stream(S, "r1", continuation=True)  # taken up again after a restart
    assert (again.length, again.continuation, again.status) == (2, True, "streaming")
    assert store.stream_chunks(S, "r1") == ["a", "b"]


def test_a_new_stream_forgets_the_finished_ones_of_its_session(store: Store) -> None:
    store.open_stream(S, "r1")
    store.append_stream_chunks(S, "r1", 0, ["a"])
    store.finish_stream(S, "r1", "completed")
    store.open_stream("other", "o1")
    store.finish_stream("other", "o1", "completed")
    store.open_stream(S, "r2")
    assert store.get_stream(S, "r1") is None and store.stream_chunks(S, "r1") == []
    assert store.get_stream("other", "o1") is not None
    latest = store.get_stream(S)
    assert latest is not None and latest.stream_id == "r2"


def test_another_store_over_the_same_database_follows_the_stream(store_factory: StoreFactory) -> None:
    with store_factory() as writer, store_factory() as reader:
        writer.open_stream(S, "r1")
        writer.append_stream_chunks(S, "r1", 0, ["a", "b"])
        seen = reader.get_stream(S)
        assert seen is not None and (seen.stream_id, seen.status, seen.length) == ("r1", "streaming", 2)
        writer.append_stream_chunks(S, "r1", 2, ["c"])
        assert reader.stream_chunks(S, "r1", 2) == ["c"]
        writer.finish_stream(S, "r1", "completed")
        final = reader.get_stream(S, "r1")
        assert final is not None and final.status == "completed"
