"""The store contract: what every backend must do, run against each one through the
parametrised ``store`` / ``store_factory`` fixtures of ``conftest.py``."""

from __future__ import annotations

import threading

import pytest

from tests.support.messages import ids, msg
from tests.support.stores import StoreFactory
from think_core.durable.crash_recovery import recover_submissions
from think_core.store import Store, Submission
from think_core.types import UIMessage

S = "session-1"


def test_ensure_session_says_whether_it_made_the_session(store_factory: StoreFactory) -> None:
    # The opening of a session trusts True to mean "holds nothing yet" (no messages, submissions
    # or state): a session another instance made, or one a write made, is not made again.
    with store_factory() as first, store_factory() as second:
        assert first.ensure_session(S) is True
        assert (first.ensure_session(S), second.ensure_session(S)) == (False, False)
        second.append_messages("written", [msg("a")])
        assert first.ensure_session("written") is False


def test_delete_and_clear_messages(store: Store) -> None:
    store.append_messages(S, [msg("a"), msg("b"), msg("c")])
    store.append_messages("other", [msg("a")])
    assert store.delete_messages(S, ["a", "zzz"]) == 1
    assert ids(store.list_messages(S)) == ["b", "c"]
    assert ids(store.list_messages("other")) == ["a"]
    # order stays monotonic after deletes: a re-added id goes to the end
    store.append_messages(S, [msg("a")])
    assert ids(store.list_messages(S)) == ["b", "c", "a"]
    store.clear_messages(S)
    assert store.list_messages(S) == []
    assert ids(store.list_messages("other")) == ["a"]


def test_one_store_is_safe_from_many_threads(store: Store) -> None:
    def worker(n: int) -> None:
        for i in range(25):
            store.append_messages(S, [msg(f"{n}-{i}")])
            store.list_messages(S)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.list_messages(S)) == 100


def test_disjoint_compactions_both_apply(store: Store) -> None:
    store.append_messages(S, [msg(x) for x in "abcdefg"])
    c1 = store.add_compaction(S, "e", "f", "late")
    c2 = store.add_compaction(S, "a", "b", "early")
    assert ids(store.history(S)) == [f"compaction_{c2}", "c", "d", f"compaction_{c1}", "g"]


def test_create_submission_fields_and_fifo_claim(store: Store) -> None:
    s1, created = store.create_submission(S, [msg("m1")], metadata={"src": "api"})
    assert created is True
    assert isinstance(s1, Submission)
    assert len(s1.submission_id) == 32 and s1.request_id == s1.submission_id
    assert s1.status == "pending" and not s1.messages_applied
    assert s1.metadata == {"src": "api"} and s1.messages == [msg("m1")]
    assert s1.started_at is None and s1.completed_at is None and s1.created_at > 0
    s2, _ = store.create_submission(S, [msg("m2")], submission_id="second")
    s3, _ = store.create_submission(S, [msg("m3")], idempotency_key="k3")
    store.create_submission("other", [msg("o1")])

    assert [s.submission_id for s in store.list_submissions(S)] == [
        s1.submission_id, "second", s3.submission_id
    ]
    claimed = store.claim_next_submission(S)
    assert claimed.submission_id == s1.submission_id
    assert claimed.status == "running" and claimed.started_at is not None
    assert store.claim_next_submission(S).submission_id == "second"
    assert store.claim_next_submission(S).submission_id == s3.submission_id
    assert store.claim_next_submission(S) is None
    assert [s.status for s in store.list_submissions(S)] == ["running"] * 3
    assert len(store.list_submissions(S, status="running", limit=2)) == 2
    assert store.list_submissions(S, status="pending") == []
    assert len(store.list_submissions("other", status=["pending", "running"])) == 1


def test_empty_submission_is_rejected(store: Store) -> None:
    with pytest.raises(ValueError):
        store.create_submission(S, [])
    assert store.list_submissions(S) == []


def test_idempotency_key_and_id_return_the_same_row(store: Store) -> None:
    first, created = store.create_submission(S, [msg("m1")], idempotency_key="k")
    assert created
    again, created = store.create_submission(S, [msg("other")], idempotency_key="k")
    assert not created and again == first
    by_id, created = store.create_submission(S, [msg("x")], submission_id=first.submission_id)
    assert not created and by_id == first
    both, created = store.create_submission(
        S, [msg("x")], submission_id=first.submission_id, idempotency_key="k"
    )
    assert not created and both == first
    # the key is scoped per session
    _, created = store.create_submission("other", [msg("m1")], idempotency_key="k")
    assert created
    assert len(store.list_submissions(S)) == 1
    # the original row is returned even after it finished
    store.finish_submission(S, first.submission_id, "completed")
    done, created = store.create_submission(S, [msg("m1")], idempotency_key="k")
    assert not created and done.status == "completed"


def test_id_and_key_naming_different_rows_is_an_error(store: Store) -> None:
    store.create_submission(S, [msg("a")], submission_id="A", idempotency_key="ka")
    store.create_submission(S, [msg("b")], submission_id="B", idempotency_key="kb")
    with pytest.raises(ValueError, match="refer to different submissions"):
        store.create_submission(S, [msg("c")], submission_id="A", idempotency_key="kb")
    assert len(store.list_submissions(S)) == 2


def test_racing_idempotency_key_across_instances_yields_one_row(store_factory: StoreFactory) -> None:
    n = 8
    stores = [store_factory() for _ in range(n)]
    barrier = threading.Barrier(n)
    results: list[tuple[Submission, bool]] = []
    errors: list[BaseException] = []

    def worker(s: Store) -> None:
        try:
            barrier.wait()
            results.append(s.create_submission(S, [msg("m")], idempotency_key="same"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in stores]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in stores:
            s.close()
    assert errors == []
    assert sum(created for _, created in results) == 1
    assert len({sub.submission_id for sub, _ in results}) == 1


def test_claims_are_exclusive_across_instances(store_factory: StoreFactory) -> None:
    with store_factory() as setup:
        expected = {
            setup.create_submission(S, [msg(f"m{i}")])[0].submission_id for i in range(60)
        }
    n = 4
    stores = [store_factory() for _ in range(n)]
    barrier = threading.Barrier(n)
    claimed: list[list[str]] = [[] for _ in range(n)]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            while (sub := stores[i].claim_next_submission(S)) is not None:
                claimed[i].append(sub.submission_id)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in stores:
            s.close()
    assert errors == []
    everything = [sid for part in claimed for sid in part]
    assert len(everything) == len(expected)
    assert set(everything) == expected
    # within each claimer the order is FIFO
    with store_factory() as check:
        order = [s.submission_id for s in check.list_submissions(S)]
        for part in claimed:
            assert part == sorted(part, key=order.index)
        assert {s.status for s in check.list_submissions(S)} == {"running"}


def test_finish_only_from_active_states(store: Store) -> None:
    a, _ = store.create_submission(S, [msg("a")], submission_id="a")
    store.create_submission(S, [msg("b")], submission_id="b")
    store.claim_next_submission(S)  # a → running
    assert store.finish_submission(S, "a", "completed") is True
    done = store.get_submission(S, "a")
    assert done.status == "completed" and done.completed_at is not None and done.error is None
    # a finished row is never changed again
    assert store.finish_submission(S, "a", "error", "late") is False
    assert store.get_submission(S, "a") == done
    # pending rows can be finished directly (abort / skip)
    assert store.finish_submission(S, "b", "aborted", "cancelled") is True
    b = store.get_submission(S, "b")
    assert (b.status, b.error) == ("aborted", "cancelled")
    assert store.claim_next_submission(S) is None
    assert store.finish_submission(S, "missing", "completed") is False
    with pytest.raises(ValueError):
        store.finish_submission(S, "b", "running")
    assert store.get_submission(S, "missing") is None


def test_mark_and_apply_submission_messages(store: Store) -> None:
    store.append_messages(S, [msg("old")])
    store.create_submission(S, [msg("old"), msg("n1"), msg("n2")], submission_id="s")
    store.create_submission(S, [msg("x")], submission_id="t")
    store.claim_next_submission(S)
    assert ids(store.apply_submission_messages(S, "s")) == ["n1", "n2"]
    assert store.get_submission(S, "s").messages_applied
    assert store.apply_submission_messages(S, "s") == []
    assert ids(store.list_messages(S)) == ["old", "n1", "n2"]
    assert store.mark_submission_applied(S, "t") is True
    assert store.mark_submission_applied(S, "t") is False
    assert store.get_submission(S, "t").messages_applied
    assert ids(store.list_messages(S)) == ["old", "n1", "n2"]  # marking does not append
    with pytest.raises(KeyError):
        store.apply_submission_messages(S, "missing")


def test_applying_a_submission_can_replace_a_stored_message_and_what_follows(store: Store) -> None:
    # An edit of "u1": the edited message has the same id; it and everything after it go.
    store.append_messages(S, [msg("u0"), msg("u1"), msg("a1"), msg("u2")])
    edited = UIMessage(id="u1", role="user", parts=[{"type": "text", "text": "edited"}])
    store.create_submission(S, [edited], submission_id="e")
    store.claim_next_submission(S)
    assert ids(store.apply_submission_messages(S, "e", replacing_from="u1")) == ["u1"]
    assert [(m.id, m.parts) for m in store.list_messages(S)][-1] == ("u1", edited.parts)
    assert ids(store.list_messages(S)) == ["u0", "u1"]
    # Applied once: a second call (a retry after a crash) deletes and appends nothing.
    store.append_messages(S, [msg("a2")])
    assert store.apply_submission_messages(S, "e", replacing_from="u1") == []
    assert ids(store.list_messages(S)) == ["u0", "u1", "a2"]
    # A regeneration of "a2": the answered user message is stored already, so nothing is appended.
    store.create_submission(S, [edited], submission_id="r")
    store.claim_next_submission(S)
    assert store.apply_submission_messages(S, "r", replacing_from="a2") == []
    assert ids(store.list_messages(S)) == ["u0", "u1"] and store.get_submission(S, "r").messages_applied
    # A message no longer stored replaces nothing.
    store.create_submission(S, [msg("u3")], submission_id="g")
    store.claim_next_submission(S)
    assert ids(store.apply_submission_messages(S, "g", replacing_from="gone")) == ["u3"]
    assert ids(store.list_messages(S)) == ["u0", "u1", "u3"]


def test_recover_running_submissions(store_factory: StoreFactory) -> None:
    with store_factory() as s:
        for sid in ("not_applied", "applied", "appended_unmarked", "done", "queued"):
            s.create_submission(S, [msg(f"{sid}-m")], submission_id=sid)
        for _ in range(4):
            s.claim_next_submission(S)
        s.apply_submission_messages(S, "applied")
        s.append_messages(S, [msg("appended_unmarked-m")])  # crashed before the marker
        s.finish_submission(S, "done", "completed")
    # the process "crashed"; a new one starts over the same file
    with store_factory() as s:
        recovered = recover_submissions(s, S)
        assert [r.submission_id for r in recovered] == ["applied", "appended_unmarked"]
        assert all(r.status == "running" and r.messages_applied for r in recovered)
        not_applied = s.get_submission(S, "not_applied")
        assert not_applied.status == "pending" and not_applied.started_at is None
        assert s.get_submission(S, "appended_unmarked").messages_applied
        assert s.get_submission(S, "done").status == "completed"
        assert s.get_submission(S, "queued").status == "pending"
        # FIFO again: the reset row runs before the one that was queued after it
        assert s.claim_next_submission(S).submission_id == "not_applied"
        # the engine finishes the recovered rows; nothing is left running from before
        for r in recovered:
            assert s.finish_submission(S, r.submission_id, "completed")
        assert recover_submissions(s, S) == []  # only "not_applied" was running: reset again
        assert s.get_submission(S, "not_applied").status == "pending"
        assert ids(s.list_messages(S)).count("appended_unmarked-m") == 1


def test_recover_respects_stale_after(store: Store) -> None:
    store.create_submission(S, [msg("m")], submission_id="live")
    store.claim_next_submission(S)
    assert recover_submissions(store, S, stale_after=3600) == []
    assert store.get_submission(S, "live").status == "running"
    assert recover_submissions(store, S) == []  # not applied: reset, nothing to return
    assert store.get_submission(S, "live").status == "pending"


def test_state_key_value(store_factory: StoreFactory) -> None:
    with store_factory() as s:
        assert s.get_state(S, "body") is None
        s.set_state(S, "body", {"model": "m", "n": [1, 2.5, None, True], "t": "é"})
        s.set_state(S, "count", 1)
        s.set_state(S, "count", 2)
        s.set_state("other", "count", 99)
        s.set_state(S, "flag", False)
        assert s.get_state(S, "count") == 2
        assert s.get_state(S, "flag") is False
        s.set_state(S, "flag", None)  # None deletes
        assert s.get_state(S, "flag") is None
    with store_factory() as s:
        assert s.get_state(S, "body") == {"model": "m", "n": [1, 2.5, None, True], "t": "é"}
        assert s.get_state(S, "count") == 2
        assert s.get_state("other", "count") == 99


def test_retake_takes_only_expired_leases_and_renews_them(store: Store) -> None:
    store.create_submission(S, [msg("a")], submission_id="a")
    store.create_submission(S, [msg("b")], submission_id="b")
    assert store.claim_next_submission(S).submission_id == "a"
    assert store.retake_stale_submissions(S, stale_after=3600) == []  # a's lease is fresh
    taken = store.retake_stale_submissions(S)  # no limit: every running row
    assert [t.submission_id for t in taken] == ["a"]
    assert store.get_submission(S, "b").status == "pending"  # pending rows are not retaken
    assert store.retake_stale_submissions(S, stale_after=3600) == []  # retaking renewed the lease


def test_heartbeat_renews_only_running_rows(store: Store) -> None:
    store.create_submission(S, [msg("a")], submission_id="a")
    assert store.heartbeat_submission(S, "a") is False  # pending: nothing to renew
    store.claim_next_submission(S)
    assert store.heartbeat_submission(S, "a") is True
    store.finish_submission(S, "a", "completed")
    assert store.heartbeat_submission(S, "a") is False  # finished: the owner learns it lost the row


def test_requeue_puts_back_only_unapplied_running_rows(store: Store) -> None:
    store.create_submission(S, [msg("a")], submission_id="a")
    store.create_submission(S, [msg("b")], submission_id="b")
    store.claim_next_submission(S)
    assert store.requeue_submission(S, "a") is True
    row = store.get_submission(S, "a")
    assert row.status == "pending" and row.started_at is None
    assert store.claim_next_submission(S).submission_id == "a"  # FIFO order is kept
    store.apply_submission_messages(S, "a")
    assert store.requeue_submission(S, "a") is False  # applied: running it again would repeat them
    assert store.requeue_submission(S, "b") is False  # pending already


def test_in_order_claim_waits_for_the_earlier_running_submission(store: Store) -> None:
    for sid in "abc":
        store.create_submission(S, [msg(f"m{sid}")], submission_id=sid)
    assert store.claim_next_submission(S, in_order=True).submission_id == "a"
    assert store.claim_next_submission(S, in_order=True) is None  # a is still running
    assert store.claim_next_submission(S).submission_id == "b"  # an unordered claim does not wait
    store.finish_submission(S, "a", "completed")
    assert store.claim_next_submission(S, in_order=True) is None  # b is running now
    store.finish_submission(S, "b", "error", "boom")
    assert store.claim_next_submission(S, in_order=True).submission_id == "c"
    assert store.claim_next_submission(S, in_order=True) is None
    assert store.claim_next_submission("other", in_order=True) is None


def test_in_order_claim_across_stores_claims_each_row_once_in_order(store_factory: StoreFactory) -> None:
    with store_factory() as first, store_factory() as second:
        for sid in "ab":
            first.create_submission(S, [msg(f"m{sid}")], submission_id=sid)
        assert first.claim_next_submission(S, in_order=True).submission_id == "a"
        assert second.claim_next_submission(S, in_order=True) is None  # held by the first store
        second.finish_submission(S, "a", "completed")
        assert second.claim_next_submission(S, in_order=True).submission_id == "b"
        assert first.claim_next_submission(S, in_order=True) is None


def test_store_submission_answer_stores_the_message_and_finishes_in_one_go(store: Store) -> None:
    store.create_submission(S, [msg("q")], submission_id="a")
    store.claim_next_submission(S)
    store.apply_submission_messages(S, "a")
    answer = msg("ans", "the answer", role="assistant")
    assert store.store_submission_answer(S, "a", answer, "completed") is True
    row = store.get_submission(S, "a")
    assert row.status == "completed" and row.completed_at is not None and row.answer_message_id == "ans"
    assert ids(store.list_messages(S)) == ["q", "ans"]
    # Finished: a second answer is refused and writes nothing.
    assert store.store_submission_answer(S, "a", msg("again", role="assistant"), "completed") is False
    assert ids(store.list_messages(S)) == ["q", "ans"]
    assert store.get_submission(S, "a").answer_message_id == "ans"


def test_store_submission_answer_without_a_message_and_its_refusals(store: Store) -> None:
    store.create_submission(S, [msg("q")], submission_id="a")
    assert store.store_submission_answer(S, "a", msg("x", role="assistant"), "completed") is False  # pending
    store.claim_next_submission(S)
    with pytest.raises(ValueError):
        store.store_submission_answer(S, "a", None, "running")
    assert store.store_submission_answer(S, "a", None, "error", "boom") is True
    row = store.get_submission(S, "a")
    assert (row.status, row.error, row.answer_message_id) == ("error", "boom", None)
    assert store.list_messages(S) == []
    assert store.store_submission_answer(S, "missing", None, "completed") is False


def test_only_the_owner_renews_and_answers_a_retaken_submission(store_factory: StoreFactory) -> None:
    with store_factory() as first, store_factory() as second:
        first.create_submission(S, [msg("q")], submission_id="a")
        first.claim_next_submission(S)
        assert second.heartbeat_submission(S, "a") is False  # not the owner
        assert first.heartbeat_submission(S, "a") is True
        assert [r.submission_id for r in second.retake_stale_submissions(S)] == ["a"]  # now the second's
        assert first.heartbeat_submission(S, "a") is False  # the first learns it lost the row
        assert first.store_submission_answer(S, "a", msg("late", role="assistant"), "completed") is False
        assert second.store_submission_answer(S, "a", msg("ans", role="assistant"), "completed") is True
        assert ids(first.list_messages(S)) == ["ans"]


def test_the_journal_of_a_running_submission(store: Store) -> None:
    store.create_submission(S, [msg("q")], submission_id="a")
    assert store.journal_submission(S, "a", "streamed", "0", {"x": 1}) is False  # pending: nothing written
    store.claim_next_submission(S)
    assert store.journal_submission(S, "a", "streamed", "0", {"parts": [{"type": "text", "text": "é"}]}) is True
    assert store.journal_submission(S, "a", "tool_started", "c1", {}) is True
    assert store.journal_submission(S, "a", "tool_finished", "c1", {"output": None, "error": "boom"}) is True
    entries = store.submission_journal(S, "a")
    assert [(e.kind, e.key) for e in entries] == [("streamed", "0"), ("tool_started", "c1"), ("tool_finished", "c1")]
    assert entries[0].data == {"parts": [{"type": "text", "text": "é"}]} and entries[2].data["error"] == "boom"
    assert entries[0].seq < entries[1].seq < entries[2].seq and entries[0].created_at > 0
    assert store.submission_journal(S, "other") == [] and store.submission_journal("other", "a") == []
    assert store.store_submission_answer(S, "a", msg("ans", role="assistant"), "completed") is True
    assert store.submission_journal(S, "a") == []  # finished: the journal is gone
    assert store.journal_submission(S, "a", "step", "1", {}) is False


def test_finishing_drops_the_journal_and_only_the_owner_writes_it(store_factory: StoreFactory) -> None:
    with store_factory() as first, store_factory() as second:
        first.create_submission(S, [msg("q")], submission_id="a")
        first.claim_next_submission(S)
        assert first.journal_submission(S, "a", "tool_started", "c1", {}) is True
        assert second.journal_submission(S, "a", "tool_finished", "c1", {}) is False  # not the owner
        assert [e.kind for e in second.submission_journal(S, "a")] == ["tool_started"]  # anyone reads it
        second.retake_stale_submissions(S)
        assert first.journal_submission(S, "a", "tool_finished", "c1", {}) is False  # lost it
        assert second.journal_submission(S, "a", "tool_finished", "c1", {"output": 1}) is True
        assert second.finish_submission(S, "a", "aborted", "cancelled") is True
        assert first.submission_journal(S, "a") == []
