"""The store contract for ``history_changes``: what changed in a session's history since a
read, on every backend — the messages written since (appended, or rewritten in place), or the
whole history after anything that removes or covers messages."""

from __future__ import annotations

from tests.support.messages import ids, msg
from tests.support.stores import StoreFactory
from think_core.store import HistoryChanges, HistoryMark, Store

S = "session-1"


def whole(store: Store) -> HistoryChanges:
    changes = store.history_changes(S)
    assert changes.whole and changes.updated == []
    assert changes.appended == store.history(S)
    return changes


def test_a_first_read_is_the_whole_history_with_compactions_applied(store: Store) -> None:
    assert store.history_changes(S) == HistoryChanges(HistoryMark(0, 0), True, [], [])  # no session yet
    store.append_messages(S, [msg(x) for x in "abcd"])
    cid = store.add_compaction(S, "b", "c", "b and c")
    assert ids(whole(store).appended) == ["a", f"compaction_{cid}", "d"]


def test_after_a_read_only_the_messages_written_since_come_back(store: Store) -> None:
    store.append_messages(S, [msg("a"), msg("b")])
    mark = whole(store).mark
    assert store.history_changes(S, mark) == HistoryChanges(mark, False, [], [])  # nothing since
    store.append_messages(S, [msg("c"), msg("a", "not again")])  # "a" is stored already: skipped
    store.upsert_message(S, msg("d"))
    changes = store.history_changes(S, mark)
    assert not changes.whole and changes.updated == []
    assert changes.appended == [msg("c"), msg("d")]
    assert store.history_changes(S, changes.mark) == HistoryChanges(changes.mark, False, [], [])
    store.append_messages("another-session", [msg("x")])  # another session's writes are not this one's
    assert store.history_changes(S, changes.mark).appended == []


def test_a_message_rewritten_in_place_comes_back_as_updated(store: Store) -> None:
    store.append_messages(S, [msg("u1"), msg("a1", role="assistant"), msg("u2")])
    mark = whole(store).mark
    store.upsert_message(S, msg("a1", "continued", role="assistant"))
    store.append_messages(S, [msg("u3")])
    store.upsert_message(S, msg("u3", "u3 edited"))  # appended and rewritten since: appended, as it is now
    changes = store.history_changes(S, mark)
    assert changes.updated == [msg("a1", "continued", role="assistant")]
    assert changes.appended == [msg("u3", "u3 edited")]


def test_a_delete_a_clear_or_a_compaction_since_reads_the_history_whole_again(store: Store) -> None:
    store.append_messages(S, [msg(x) for x in "abcd"])
    for change in (
        lambda: store.delete_messages(S, ["d"]),
        lambda: store.add_compaction(S, "a", "b", "a and b"),
        lambda: store.clear_messages(S),
    ):
        mark = whole(store).mark
        change()
        changes = store.history_changes(S, mark)
        assert changes.whole and changes.appended == store.history(S) and changes.mark != mark
    store.append_messages(S, [msg("e")])
    mark = whole(store).mark
    assert store.delete_messages(S, ["missing"]) == 0
    assert store.history_changes(S, mark) == HistoryChanges(mark, False, [], [])  # deleting nothing changes nothing


def test_a_covered_message_rewritten_since_is_updated_and_not_in_the_history(store: Store) -> None:
    store.append_messages(S, [msg(x) for x in "abc"])
    cid = store.add_compaction(S, "a", "b", "a and b")
    read = whole(store)
    store.upsert_message(S, msg("a", "rewritten under the summary"))
    changes = store.history_changes(S, read.mark)
    assert not changes.whole and changes.appended == []
    assert changes.updated == [msg("a", "rewritten under the summary")]  # the reader knows it is covered
    assert ids(store.history(S)) == [f"compaction_{cid}", "c"]


def test_a_mark_the_session_never_reached_reads_it_whole(store: Store) -> None:
    store.append_messages(S, [msg("a")])
    changes = store.history_changes(S, HistoryMark(10_000, 10_000))  # say, another database's
    assert changes.whole and ids(changes.appended) == ["a"]


def test_a_submission_applied_and_answered_comes_back_as_its_writes(store: Store) -> None:
    store.append_messages(S, [msg("u1"), msg("a1", role="assistant")])
    mark = whole(store).mark
    row, _ = store.create_submission(S, [msg("u2")])
    assert store.history_changes(S, mark).appended == []  # accepted, not applied
    claimed = store.claim_next_submission(S)
    assert claimed is not None and claimed.submission_id == row.submission_id
    store.apply_submission_messages(S, row.submission_id)
    store.store_submission_answer(S, row.submission_id, msg("a2", role="assistant"), "completed")
    changes = store.history_changes(S, mark)
    assert not changes.whole and changes.appended == [msg("u2"), msg("a2", role="assistant")]
    # An edit replaces from a stored message on: the history is read whole.
    edit, _ = store.create_submission(S, [msg("u2b")])
    assert store.claim_next_submission(S) is not None
    store.apply_submission_messages(S, edit.submission_id, replacing_from="u2")
    after = store.history_changes(S, changes.mark)
    assert after.whole and ids(after.appended) == ["u1", "a1", "u2b"]


def test_another_store_over_the_same_database_sees_the_other_s_writes(store_factory: StoreFactory) -> None:
    with store_factory() as first, store_factory() as second:
        first.append_messages(S, [msg("u1"), msg("a1", role="assistant")])
        mark = first.history_changes(S).mark
        second.upsert_message(S, msg("a1", "edited elsewhere", role="assistant"))
        second.append_messages(S, [msg("u2")])
        changes = first.history_changes(S, mark)
        assert changes.updated == [msg("a1", "edited elsewhere", role="assistant")]
        assert changes.appended == [msg("u2")]
        second.add_compaction(S, "u1", "a1", "the start")
        assert first.history_changes(S, changes.mark).whole
