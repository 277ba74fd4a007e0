"""The store contract, continued: who owns a running submission and for how long, taking over
one whose owner is gone, and the store-wide views recovery reads (every backend)."""

from __future__ import annotations

import os
import socket
import time

from tests.support.messages import msg
from tests.support.stores import StoreFactory
from think_core.durable.crash_recovery import recover_orphaned_submissions
from think_core.process_identity import this_process
from think_core.store import Store

S = "session-1"


def test_a_claim_records_the_owner_and_its_lease(store: Store) -> None:
    me = store.submission_owner()
    assert (me.host, me.pid, me.started) == (socket.gethostname(), os.getpid(), this_process().started)
    store.create_submission(S, [msg("q")], submission_id="a")
    assert store.get_submission(S, "a").owner is None  # pending: nobody holds it
    before = time.time()
    row = store.claim_next_submission(S, lease=30.0)
    assert row is not None and row.owner == me
    assert row.heartbeat_at is not None and before <= row.heartbeat_at <= time.time()
    assert row.lease_expires_at == row.heartbeat_at + 30.0
    assert store.heartbeat_submission(S, "a") is True
    renewed = store.get_submission(S, "a")
    assert renewed.heartbeat_at >= row.heartbeat_at and renewed.lease_expires_at == renewed.heartbeat_at + 30.0
    store.finish_submission(S, "a", "completed")
    done = store.get_submission(S, "a")
    assert done.owner == me and done.lease_expires_at is None  # who ran it stays; no lease any more


def test_a_claim_without_a_lease_records_no_expiry(store: Store) -> None:
    store.create_submission(S, [msg("q")], submission_id="a")
    row = store.claim_next_submission(S)
    assert row is not None and row.owner == store.submission_owner() and row.lease_expires_at is None


def test_retaking_one_row_only_from_the_owner_and_heartbeat_seen(store_factory: StoreFactory) -> None:
    with store_factory() as first, store_factory() as second:
        first.create_submission(S, [msg("q")], submission_id="a")
        seen = first.claim_next_submission(S, lease=30.0)
        assert seen is not None and seen.owner is not None and seen.heartbeat_at is not None
        # The owner renewed after the row was seen: it is alive, the takeover does nothing.
        time.sleep(0.01)
        assert first.heartbeat_submission(S, "a") is True
        assert second.retake_submission(S, "a", if_owner=seen.owner.id, if_heartbeat_at=seen.heartbeat_at) is None
        now = first.get_submission(S, "a")
        assert second.retake_submission(S, "a", if_owner="someone else", if_heartbeat_at=now.heartbeat_at) is None
        taken = second.retake_submission(S, "a", if_owner=now.owner.id, if_heartbeat_at=now.heartbeat_at, lease=5.0)
        assert taken is not None and taken.submission_id == "a" and taken.owner == first.submission_owner()
        row = second.get_submission(S, "a")
        assert row.status == "running" and row.owner == second.submission_owner()
        assert row.lease_expires_at == row.heartbeat_at + 5.0
        assert first.heartbeat_submission(S, "a") is False  # the first learns it lost the row
        assert second.heartbeat_submission(S, "a") is True
        # Only a running row is taken over.
        second.finish_submission(S, "a", "completed")
        done = second.get_submission(S, "a")
        assert first.retake_submission(S, "a", if_owner=done.owner.id, if_heartbeat_at=done.heartbeat_at) is None


def test_retaking_stale_rows_records_the_new_owner_and_lease(store_factory: StoreFactory) -> None:
    with store_factory() as first, store_factory() as second:
        first.create_submission(S, [msg("q")], submission_id="a")
        first.claim_next_submission(S, lease=30.0)
        [taken] = second.retake_stale_submissions(S, lease=7.0)
        assert taken.owner == first.submission_owner()  # as it was before the takeover
        row = second.get_submission(S, "a")
        assert row.owner == second.submission_owner() and row.lease_expires_at == row.heartbeat_at + 7.0


def test_an_expired_lease_is_recovered_by_another_store_and_a_fresh_one_is_not(store_factory: StoreFactory) -> None:
    with store_factory() as first, store_factory() as second:
        first.create_submission(S, [msg("q1")], submission_id="a")
        first.create_submission(S, [msg("q2")], submission_id="b")
        first.claim_next_submission(S, lease=1.0)
        first.apply_submission_messages(S, "a")
        assert recover_orphaned_submissions(second, S, lease=30.0) == []  # the owner's 1 s lease is fresh
        assert recover_orphaned_submissions(first, S, lease=30.0) == []  # never from oneself
        time.sleep(1.2)
        [row] = recover_orphaned_submissions(second, S, lease=30.0)
        assert row.submission_id == "a" and row.messages_applied
        assert second.get_submission(S, "a").owner == second.submission_owner()
        assert recover_orphaned_submissions(first, S, lease=30.0) == []  # the second's 30 s lease now


def test_an_orphan_never_applied_goes_back_to_pending(store_factory: StoreFactory) -> None:
    with store_factory() as first, store_factory() as second:
        first.create_submission(S, [msg("q1")], submission_id="a")
        first.claim_next_submission(S, lease=1.0)
        time.sleep(1.2)
        assert recover_orphaned_submissions(second, S, lease=30.0) == []
        assert second.get_submission(S, "a").status == "pending"


def test_running_submissions_and_sessions_with_unfinished_ones(store: Store) -> None:
    assert store.running_submissions() == [] and store.pending_session_ids() == []
    store.create_submission("s1", [msg("q1")], submission_id="a")
    store.create_submission("s2", [msg("q2")], submission_id="b")
    store.create_submission("s2", [msg("q3")], submission_id="c")
    store.create_submission("s3", [msg("q4")], submission_id="d")
    assert store.pending_session_ids() == ["s1", "s2", "s3"]
    store.claim_next_submission("s2", lease=30.0)
    store.claim_next_submission("s1", lease=30.0)
    store.finish_submission("s3", "d", "aborted")
    running = store.running_submissions()
    assert [(r.session_id, r.submission_id) for r in running] == [("s1", "a"), ("s2", "b")]  # acceptance order
    assert all(r.owner == store.submission_owner() and r.lease_expires_at is not None for r in running)
    assert store.pending_session_ids() == ["s1", "s2"]


def test_unfinished_submissions_of_every_session_say_who_holds_them_without_their_messages(store: Store) -> None:
    assert store.unfinished_submissions() == []
    store.create_submission("s1", [msg("q1")], submission_id="a")
    store.create_submission("s2", [msg("q2")], submission_id="b")
    store.create_submission("s2", [msg("q3")], submission_id="c")
    store.create_submission("s3", [msg("q4")], submission_id="d")
    store.claim_next_submission("s2", lease=30.0)
    store.finish_submission("s3", "d", "aborted")
    rows = store.unfinished_submissions()
    assert [(r.session_id, r.submission_id, r.status) for r in rows] == [
        ("s1", "a", "pending"), ("s2", "b", "running"), ("s2", "c", "pending")
    ]  # acceptance order, the finished one left out
    running = store.get_submission("s2", "b")
    assert running is not None
    held = rows[1]
    assert held.owner == store.submission_owner() and held.lease_expires_at == running.lease_expires_at
    assert (held.heartbeat_at, held.started_at, held.created_at) == (running.heartbeat_at, running.started_at, running.created_at)
    assert rows[0].owner is None and rows[0].lease_expires_at is None


def test_a_takeover_without_a_lease_does_not_inherit_the_previous_owners(store_factory: StoreFactory) -> None:
    with store_factory() as first, store_factory() as second:
        first.create_submission(S, [msg("q")], submission_id="a")
        first.claim_next_submission(S, lease=1.0)
        second.retake_stale_submissions(S)
        assert second.get_submission(S, "a").lease_expires_at is None
