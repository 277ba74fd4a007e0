"""The store contract for messages and compaction overlays: what ``list_messages`` and
``history`` must return on every backend, through the protocol alone."""

from __future__ import annotations

import pytest

from tests.support.messages import ids, msg
from tests.support.stores import PROTOCOL_METHODS, StoreFactory
from think_core.store import COMPACTION_ROLE, COMPACTION_SUMMARY_PREFIX, Store
from think_core.types import UIMessage

S = "session-1"

TOOL_PART = {
    "type": "tool-search",
    "toolCallId": "call_1",
    "state": "output-available",
    "input": {"q": "ünïcode", "n": 3, "nested": [1, {"x": None}], "f": 2.5, "b": False},
    "output": {"hits": ["a", "b"]},
}


def summary(message: UIMessage) -> str:
    return message.parts[0]["text"].removeprefix(COMPACTION_SUMMARY_PREFIX)


def test_the_backend_offers_every_protocol_method_and_the_suite_sees_no_other(store: Store) -> None:
    assert all(callable(getattr(store, name)) for name in PROTOCOL_METHODS)
    assert isinstance(store, Store)
    with pytest.raises(AttributeError, match="not part of the Store protocol"):
        store.list_compactions  # noqa: B018  (a SQLite extra)


def test_messages_come_back_exactly_as_stored(store: Store) -> None:
    stored = [
        UIMessage(id="s1", role="system", parts=[]),
        msg("u1", "héllo", metadata={"channel": "ws", "turnMetadata": {"k": [1, None]}}),
        UIMessage(id="a1", role="assistant", parts=[{"type": "step-start"}, {"type": "reasoning", "text": "hm"}, TOOL_PART]),
    ]
    assert store.append_messages(S, stored) == stored
    back = store.list_messages(S)
    assert back == stored
    assert back[2].metadata is None and back[2].parts[2]["input"]["nested"] == [1, {"x": None}]
    assert store.list_messages("another-session") == []


def test_append_skips_ids_already_stored_or_repeated(store: Store) -> None:
    store.append_messages(S, [msg("a"), msg("b")])
    appended = store.append_messages(S, [msg("a", "new a"), msg("c"), msg("c", "second c"), msg("d")])
    assert ids(appended) == ["c", "d"]
    assert [m.text for m in store.list_messages(S)] == ["a", "b", "c", "d"]  # first writes win
    assert ids(store.append_messages("another-session", [msg("a")])) == ["a"]  # ids are per session
    assert store.append_messages(S, []) == []


def test_upsert_keeps_the_position_of_a_stored_id(store: Store) -> None:
    store.append_messages(S, [msg("a"), msg("b"), msg("c")])
    store.upsert_message(S, msg("a", "A2", role="assistant", metadata={"v": 2}))
    store.upsert_message(S, msg("new"))
    store.append_messages(S, [msg("last")])
    messages = store.list_messages(S)
    assert ids(messages) == ["a", "b", "c", "new", "last"]
    assert messages[0] == msg("a", "A2", role="assistant", metadata={"v": 2})


def test_deleting_counts_only_stored_messages_and_a_readded_id_goes_last(store: Store) -> None:
    store.append_messages(S, [msg("a"), msg("b")])
    assert store.delete_messages(S, []) == 0
    assert store.delete_messages(S, ["a", "a", "missing"]) == 1
    store.append_messages(S, [msg("a")])
    assert ids(store.list_messages(S)) == ["b", "a"]


def test_history_replaces_a_compacted_range_with_one_summary_message(store: Store) -> None:
    store.append_messages(S, [msg(x) for x in "abcde"])
    cid = store.add_compaction(S, "b", "d", "b to d")
    store.append_messages(S, [msg("f")])
    history = store.history(S)
    assert ids(history) == ["a", f"compaction_{cid}", "e", "f"]
    assert history[1] == UIMessage(
        id=f"compaction_{cid}",
        role=COMPACTION_ROLE,
        parts=[{"type": "text", "text": COMPACTION_SUMMARY_PREFIX + "b to d"}],
        metadata={"compaction": {"id": cid, "from": "b", "to": "d"}},
    )
    assert ids(store.list_messages(S)) == list("abcdef")  # the originals are kept
    assert store.history("another-session") == []


def test_a_newer_overlapping_compaction_absorbs_the_older_ones(store: Store) -> None:
    store.append_messages(S, [msg(x) for x in "abcdefgh"])
    store.add_compaction(S, "b", "c", "one")
    store.add_compaction(S, "e", "f", "two")
    third = store.add_compaction(S, "c", "e", "three")  # touches both: the union b..f
    history = store.history(S)
    assert ids(history) == ["a", f"compaction_{third}", "g", "h"]
    assert summary(history[1]) == "three"
    assert history[1].metadata == {"compaction": {"id": third, "from": "b", "to": "f"}}


def test_a_summary_message_can_anchor_the_next_compaction(store: Store) -> None:
    store.append_messages(S, [msg(x) for x in "abcdef"])
    first = store.add_compaction(S, "b", "c", "one")
    # a summariser working on history() sees compaction_<n>; it stands for b (start) / c (end)
    second = store.add_compaction(S, "a", f"compaction_{first}", "two")
    third = store.add_compaction(S, f"compaction_{second}", "d", "three")
    history = store.history(S)
    assert ids(history) == [f"compaction_{third}", "e", "f"]
    assert history[0].metadata == {"compaction": {"id": third, "from": "a", "to": "d"}}


def test_a_real_message_that_looks_like_a_summary_id_is_a_plain_anchor(store: Store) -> None:
    store.append_messages(S, [msg("compaction_7"), msg("b"), msg("c")])
    cid = store.add_compaction(S, "compaction_7", "b", "x")
    assert ids(store.history(S)) == [f"compaction_{cid}", "c"]


def test_bad_compaction_ranges_are_refused_and_change_nothing(store: Store) -> None:
    store.append_messages(S, [msg(x) for x in "abc"])
    for start, end, error in (("a", "zzz", "unknown message"), ("c", "a", "reversed"),
                              ("compaction_99", "b", "unknown compaction")):
        with pytest.raises(ValueError, match=error):
            store.add_compaction(S, start, end, "x")
    with pytest.raises(ValueError, match="unknown message"):
        store.add_compaction("another-session", "a", "b", "x")  # anchors are per session
    assert ids(store.history(S)) == ["a", "b", "c"]


def test_deleting_an_anchor_drops_its_overlay_and_clearing_drops_all(store: Store) -> None:
    store.append_messages(S, [msg(x) for x in "abcdef"])
    store.add_compaction(S, "a", "b", "kept")
    store.add_compaction(S, "d", "e", "dropped")
    store.delete_messages(S, ["e"])
    assert [m.id.startswith("compaction_") for m in store.history(S)] == [True, False, False, False]
    store.append_messages(S, [msg("e")])  # the id is back, the overlay is not
    assert ids(store.history(S))[1:] == ["c", "d", "f", "e"]
    store.clear_messages(S)
    assert store.history(S) == [] and store.list_messages(S) == []
    store.append_messages(S, [msg("a"), msg("b")])
    assert ids(store.history(S)) == ["a", "b"]  # no old overlay comes back with reused ids


def test_another_store_over_the_same_database_sees_it_all(store_factory: StoreFactory) -> None:
    with store_factory() as first:
        first.append_messages(S, [msg("u1"), msg("a1", role="assistant")])
        cid = first.add_compaction(S, "u1", "u1", "greeting")
        first.set_state(S, "last_body", {"model": "x"})
        with store_factory() as second:
            assert ids(second.history(S)) == [f"compaction_{cid}", "a1"]
            second.upsert_message(S, msg("a1", "edited", role="assistant"))
            assert second.get_state(S, "last_body") == {"model": "x"}
        assert first.list_messages(S)[1].text == "edited"
    with store_factory() as reopened:  # a "restart"
        assert ids(reopened.history(S)) == [f"compaction_{cid}", "a1"]
