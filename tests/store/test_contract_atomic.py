"""The store contract for ``Store.atomic``: the calls made inside one block are one transaction
on every backend — they see each other's writes, commit together, and a failure inside rolls
back every one of them; other store instances over the same database see all or nothing."""

from __future__ import annotations

import threading

import pytest

from tests.support.stores import StoreFactory
from think_core.store import Store
from think_core.types import UIMessage

S = "session-1"


def _message(message_id: str, text: str = "hi") -> UIMessage:
    return UIMessage(id=message_id, role="user", parts=[{"type": "text", "text": text}])


def test_calls_inside_see_each_other_and_commit_together(store: Store) -> None:
    with store.atomic(S):
        store.append_messages(S, [_message("u1")])
        store.open_stream(S, "r1", message_ids=["u1"])
        store.append_stream_chunks(S, "r1", 0, ['{"type":"start"}'])
        store.set_state(S, "k", {"v": 1})
        # reads inside the block see what it wrote so far
        assert [m.id for m in store.list_messages(S)] == ["u1"]
        info = store.get_stream(S, "r1")
        assert info is not None and info.length == 1
        assert store.get_state(S, "k") == {"v": 1}
    assert [m.id for m in store.list_messages(S)] == ["u1"]
    assert store.stream_chunks(S, "r1") == ['{"type":"start"}']
    assert store.get_state(S, "k") == {"v": 1}


def test_a_failure_inside_rolls_back_every_call(store: Store) -> None:
    store.append_messages(S, [_message("u0")])
    with pytest.raises(RuntimeError, match="boom"), store.atomic(S):
        store.append_messages(S, [_message("u1")])
        store.open_stream(S, "r1")
        store.set_state(S, "k", 1)
        raise RuntimeError("boom")
    assert [m.id for m in store.list_messages(S)] == ["u0"]
    assert store.get_stream(S, "r1") is None
    assert store.get_state(S, "k") is None
    # the store works on afterwards
    with store.atomic(S):
        store.set_state(S, "k", 2)
    assert store.get_state(S, "k") == 2


def test_nested_blocks_join_the_outer_one(store: Store) -> None:
    with pytest.raises(RuntimeError), store.atomic(S):
        with store.atomic(S):
            store.set_state(S, "inner", 1)
        with store.atomic("session-2"):  # another session's write in the same transaction
            store.set_state("session-2", "k", 1)
        raise RuntimeError("after the inner blocks ended")
    assert store.get_state(S, "inner") is None
    assert store.get_state("session-2", "k") is None


def test_a_durable_turns_end_in_one_block(store: Store) -> None:
    """The calls a durable turn's end makes together: its journal, its answer with the
    completion, its stream's end, and whether anything else of the session is unfinished."""
    row, _ = store.create_submission(S, [_message("u1")])
    claimed = store.claim_next_submission(S)
    assert claimed is not None and claimed.submission_id == row.submission_id
    assert claimed.progress == 0  # nothing journaled yet
    with store.atomic(S):  # the turn's set-up: its stream opened, its messages applied
        store.open_stream(S, row.submission_id, message_ids=["u1"])
        assert [m.id for m in store.apply_submission_messages(S, row.submission_id)] == ["u1"]
    answer = UIMessage(id="a1", role="assistant", parts=[{"type": "text", "text": "hello"}])
    with store.atomic(S):
        assert store.journal_submission(S, row.submission_id, "step", "0", {"n": 0})
        store.append_stream_chunks(S, row.submission_id, 0, ['{"type":"start"}', '{"type":"finish"}'])
        assert store.finish_stream(S, row.submission_id, "completed")
        assert store.store_submission_answer(S, row.submission_id, answer, "completed")
        assert store.list_submissions(S, status=("pending", "running")) == []
    done = store.get_submission(S, row.submission_id)
    assert done is not None and (done.status, done.answer_message_id) == ("completed", "a1")
    assert [m.id for m in store.list_messages(S)] == ["u1", "a1"]
    stream = store.get_stream(S, row.submission_id)
    assert stream is not None and (stream.status, stream.length) == ("completed", 2)


def test_the_progress_marker_counts_journal_entries(store: Store) -> None:
    row, _ = store.create_submission(S, [_message("u1")])
    assert row.progress == 0
    store.claim_next_submission(S)
    with store.atomic(S):
        store.journal_submission(S, row.submission_id, "streamed", "0", {})
        store.journal_submission(S, row.submission_id, "tool_started", "c1", {})
    after = store.get_submission(S, row.submission_id)
    assert after is not None and after.progress == 2
    assert [e.kind for e in store.submission_journal(S, row.submission_id)] == ["streamed", "tool_started"]


def test_another_instance_sees_all_or_nothing(store_factory: StoreFactory) -> None:
    with store_factory() as writer, store_factory() as reader:
        inside = threading.Event()
        release = threading.Event()
        seen: list[object] = []

        def write() -> None:
            with writer.atomic(S):
                writer.set_state(S, "a", 1)
                inside.set()
                assert release.wait(30)
                writer.set_state(S, "b", 2)

        thread = threading.Thread(target=write)
        thread.start()
        try:
            assert inside.wait(30)
            seen.append(reader.get_state(S, "a"))  # a snapshot before the block commits
        finally:
            release.set()
            thread.join(30)
        assert seen == [None]
        assert (reader.get_state(S, "a"), reader.get_state(S, "b")) == (1, 2)
