"""Tests of the SQLite persistence layer (DESIGN §7) against real database files."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from think_core.store import (
    COMPACTION_ROLE,
    SCHEMA_VERSION,
    SQLiteStore,
    Store,
    Submission,
    open_store,
)
from think_core.types import UIMessage

S = "session-1"


def msg(mid: str, text: str = "", role: str = "user", **kw) -> UIMessage:
    return UIMessage(id=mid, role=role, parts=[{"type": "text", "text": text or mid}], **kw)


def ids(messages) -> list[str]:
    return [m.id for m in messages]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "think.db"


@pytest.fixture
def store(db: Path):
    with SQLiteStore(db) as s:
        yield s


# ---------------------------------------------------------------- basics


def test_file_store_uses_wal_and_schema_version(db: Path) -> None:
    with SQLiteStore(db) as s:
        s.ensure_session(S)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"sessions", "messages", "compactions", "submissions", "state"} <= tables
    finally:
        conn.close()


def test_schema_is_idempotent_and_newer_version_is_refused(db: Path) -> None:
    with SQLiteStore(db) as s:
        s.append_messages(S, [msg("a")])
    with SQLiteStore(db) as s:  # reopening re-runs the schema without harm
        assert ids(s.list_messages(S)) == ["a"]
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="newer"):
        SQLiteStore(db)


def test_memory_store_works_and_is_private() -> None:
    with SQLiteStore() as a, SQLiteStore(":memory:") as b:
        a.append_messages(S, [msg("a")])
        assert ids(a.list_messages(S)) == ["a"]
        assert b.list_messages(S) == []
        assert a._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_store_satisfies_protocol_and_open_store(db: Path) -> None:
    s1 = open_store(None)
    s2 = open_store(db)
    s3 = open_store(str(db))
    try:
        assert isinstance(s1, SQLiteStore) and s1.path == ":memory:"
        assert isinstance(s2, Store) and isinstance(s3, SQLiteStore)
        assert open_store(s2) is s2
        s2.append_messages(S, [msg("x")])
        assert ids(s3.list_messages(S)) == ["x"]
    finally:
        for s in (s1, s2, s3):
            s.close()
    with pytest.raises(TypeError):
        open_store(42)  # type: ignore[arg-type]


def test_close_is_idempotent_and_use_after_close_fails(db: Path) -> None:
    s = SQLiteStore(db)
    s.close()
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.list_messages(S)


def test_sessions(store: SQLiteStore) -> None:
    assert store.list_sessions() == []
    store.ensure_session("b")
    store.ensure_session("a")
    store.ensure_session("b")
    store.append_messages("c", [msg("m")])  # writes create the session implicitly
    assert store.list_sessions() == ["b", "a", "c"]


# ---------------------------------------------------------------- messages


def test_message_round_trip_keeps_parts_and_metadata(store: SQLiteStore) -> None:
    tool_part = {
        "type": "tool-search",
        "toolCallId": "call_1",
        "state": "output-available",
        "input": {"q": "ünïcode", "n": 3, "nested": [1, {"x": None}]},
        "output": {"hits": ["a", "b"]},
    }
    original = [
        msg("u1", "hello", metadata={"channel": "ws", "turnMetadata": {"k": [1, 2]}}),
        UIMessage(
            id="a1",
            role="assistant",
            parts=[{"type": "step-start"}, {"type": "reasoning", "text": "hm"}, tool_part],
        ),
        UIMessage(id="s1", role="system", parts=[]),
    ]
    assert store.append_messages(S, original) == original
    assert store.list_messages(S) == original
    assert store.get_message(S, "a1") == original[1]
    assert store.get_message(S, "a1").metadata is None
    assert store.get_message(S, "missing") is None
    assert store.get_message("other-session", "u1") is None


def test_append_is_idempotent_by_id(store: SQLiteStore) -> None:
    assert ids(store.append_messages(S, [msg("a"), msg("b")])) == ["a", "b"]
    appended = store.append_messages(S, [msg("b", "changed"), msg("c"), msg("c", "dup"), msg("a")])
    assert ids(appended) == ["c"]
    assert ids(store.list_messages(S)) == ["a", "b", "c"]
    assert store.get_message(S, "b").text == "b"  # the skipped duplicate did not overwrite
    assert store.get_message(S, "c").text == "c"
    # ids are scoped per session
    assert ids(store.append_messages("other", [msg("a")])) == ["a"]
    assert store.append_messages(S, []) == []


def test_upsert_replaces_in_place_and_appends_new(store: SQLiteStore) -> None:
    store.append_messages(S, [msg("a"), msg("b"), msg("c")])
    store.upsert_message(S, msg("b", "B2", role="assistant", metadata={"v": 2}))
    store.upsert_message(S, msg("d"))
    messages = store.list_messages(S)
    assert ids(messages) == ["a", "b", "c", "d"]
    assert messages[1] == msg("b", "B2", role="assistant", metadata={"v": 2})
    # an appended message after an upsert still goes to the end
    store.upsert_message(S, msg("a", "A2"))
    store.append_messages(S, [msg("e")])
    assert ids(store.list_messages(S)) == ["a", "b", "c", "d", "e"]
    assert store.get_message(S, "a").text == "A2"


def test_delete_and_clear_messages(store: SQLiteStore) -> None:
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


def test_second_store_over_same_file_sees_same_history(db: Path) -> None:
    first = [msg("u1", "hi"), msg("a1", "hello", role="assistant", metadata={"m": 1})]
    with SQLiteStore(db) as s:
        s.append_messages(S, first)
        s.set_state(S, "last_body", {"model": "x"})
        s.add_compaction(S, "u1", "u1", "greeting")
    # "restart": a brand-new store object over the same file
    with SQLiteStore(db) as s:
        assert s.list_messages(S) == first
        assert s.get_state(S, "last_body") == {"model": "x"}
        assert ids(s.history(S)) == ["compaction_1", "a1"]
        assert s.list_sessions() == [S]
    # two live instances see each other's writes
    with SQLiteStore(db) as a, SQLiteStore(db) as b:
        a.append_messages(S, [msg("u2")])
        assert ids(b.list_messages(S)) == ["u1", "a1", "u2"]
        b.upsert_message(S, msg("u1", "edited"))
        assert a.get_message(S, "u1").text == "edited"


def test_one_store_is_safe_from_many_threads(store: SQLiteStore) -> None:
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


# ---------------------------------------------------------------- compactions


def _summary_text(m: UIMessage) -> str:
    return m.parts[0]["text"]


def test_single_compaction_history_keeps_originals(store: SQLiteStore) -> None:
    store.append_messages(S, [msg(x) for x in "abcde"])
    cid = store.add_compaction(S, "b", "d", "b to d")
    hist = store.history(S)
    assert ids(hist) == ["a", f"compaction_{cid}", "e"]
    synthetic = hist[1]
    assert synthetic.role == COMPACTION_ROLE == "user"
    assert synthetic.parts == [
        {"type": "text", "text": "Summary of the earlier conversation:\nb to d"}
    ]
    assert synthetic.metadata == {"compaction": {"id": cid, "from": "b", "to": "d"}}
    assert ids(store.list_messages(S)) == list("abcde")
    [row] = store.list_compactions(S)
    assert (row.id, row.from_message_id, row.to_message_id, row.summary) == (cid, "b", "d", "b to d")
    # messages appended after the compaction show after it
    store.append_messages(S, [msg("f")])
    assert ids(store.history(S)) == ["a", f"compaction_{cid}", "e", "f"]


def test_overlapping_compaction_supersedes_and_extends(store: SQLiteStore) -> None:
    store.append_messages(S, [msg(x) for x in "abcdefg"])
    first = store.add_compaction(S, "b", "c", "first")
    second = store.add_compaction(S, "c", "e", "second")  # overlaps, extends to e
    hist = store.history(S)
    assert ids(hist) == ["a", f"compaction_{second}", "f", "g"]
    assert _summary_text(hist[1]).endswith("second")
    assert hist[1].metadata["compaction"] == {"id": second, "from": "b", "to": "e"}
    assert [c.id for c in store.list_compactions(S)] == [first, second]
    assert ids(store.list_messages(S)) == list("abcdefg")


def test_compaction_can_extend_from_synthetic_message(store: SQLiteStore) -> None:
    store.append_messages(S, [msg(x) for x in "abcdef"])
    first = store.add_compaction(S, "a", "b", "one")
    # a summariser working on history() sees compaction_<n> as the first message
    second = store.add_compaction(S, f"compaction_{first}", "d", "two")
    hist = store.history(S)
    assert ids(hist) == [f"compaction_{second}", "e", "f"]
    assert hist[0].metadata["compaction"] == {"id": second, "from": "a", "to": "d"}
    assert store.list_compactions(S)[-1].from_message_id == "a"


def test_disjoint_compactions_both_apply(store: SQLiteStore) -> None:
    store.append_messages(S, [msg(x) for x in "abcdefg"])
    c1 = store.add_compaction(S, "e", "f", "late")
    c2 = store.add_compaction(S, "a", "b", "early")
    assert ids(store.history(S)) == [f"compaction_{c2}", "c", "d", f"compaction_{c1}", "g"]


def test_compaction_validation_and_cleanup(store: SQLiteStore) -> None:
    store.append_messages(S, [msg(x) for x in "abcd"])
    with pytest.raises(ValueError, match="unknown message"):
        store.add_compaction(S, "a", "zzz", "x")
    with pytest.raises(ValueError, match="reversed"):
        store.add_compaction(S, "c", "a", "x")
    with pytest.raises(ValueError, match="unknown compaction"):
        store.add_compaction(S, "compaction_99", "b", "x")
    cid = store.add_compaction(S, "b", "c", "x")
    assert ids(store.history(S)) == ["a", f"compaction_{cid}", "d"]
    store.delete_messages(S, ["c"])  # an anchor is gone: the overlay is dropped
    assert store.list_compactions(S) == []
    assert ids(store.history(S)) == ["a", "b", "d"]
    store.add_compaction(S, "a", "b", "y")
    store.clear_messages(S)
    assert store.list_compactions(S) == []
    assert store.history(S) == []


# ---------------------------------------------------------------- submissions


def test_create_submission_fields_and_fifo_claim(store: SQLiteStore) -> None:
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


def test_empty_submission_is_rejected(store: SQLiteStore) -> None:
    with pytest.raises(ValueError):
        store.create_submission(S, [])
    assert store.list_submissions(S) == []


def test_idempotency_key_and_id_return_the_same_row(store: SQLiteStore) -> None:
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


def test_id_and_key_naming_different_rows_is_an_error(store: SQLiteStore) -> None:
    store.create_submission(S, [msg("a")], submission_id="A", idempotency_key="ka")
    store.create_submission(S, [msg("b")], submission_id="B", idempotency_key="kb")
    with pytest.raises(ValueError, match="refer to different submissions"):
        store.create_submission(S, [msg("c")], submission_id="A", idempotency_key="kb")
    assert len(store.list_submissions(S)) == 2


def test_racing_idempotency_key_across_instances_yields_one_row(db: Path) -> None:
    n = 8
    stores = [SQLiteStore(db) for _ in range(n)]
    barrier = threading.Barrier(n)
    results: list[tuple[Submission, bool]] = []
    errors: list[BaseException] = []

    def worker(s: SQLiteStore) -> None:
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


def test_claims_are_exclusive_across_instances(db: Path) -> None:
    with SQLiteStore(db) as setup:
        expected = {
            setup.create_submission(S, [msg(f"m{i}")])[0].submission_id for i in range(60)
        }
    n = 4
    stores = [SQLiteStore(db) for _ in range(n)]
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
    with SQLiteStore(db) as check:
        order = [s.submission_id for s in check.list_submissions(S)]
        for part in claimed:
            assert part == sorted(part, key=order.index)
        assert {s.status for s in check.list_submissions(S)} == {"running"}


_CLAIMER = textwrap.dedent(
    """
    import json, sys
    from think_core.store import SQLiteStore
    with SQLiteStore(sys.argv[1]) as s:
        got = []
        while (sub := s.claim_next_submission("session-1")) is not None:
            got.append(sub.submission_id)
    print(json.dumps(got))
    """
)


def test_claims_are_exclusive_across_processes(db: Path) -> None:
    with SQLiteStore(db) as setup:
        expected = {
            setup.create_submission(S, [msg(f"m{i}")])[0].submission_id for i in range(80)
        }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CLAIMER, str(db)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    claimed: list[str] = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        claimed.extend(json.loads(out))
    assert sorted(claimed) == sorted(expected)


def test_finish_only_from_active_states(store: SQLiteStore) -> None:
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


def test_mark_and_apply_submission_messages(store: SQLiteStore) -> None:
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


def test_recover_running_submissions(db: Path) -> None:
    with SQLiteStore(db) as s:
        for sid in ("not_applied", "applied", "appended_unmarked", "done", "queued"):
            s.create_submission(S, [msg(f"{sid}-m")], submission_id=sid)
        for _ in range(4):
            s.claim_next_submission(S)
        s.apply_submission_messages(S, "applied")
        s.append_messages(S, [msg("appended_unmarked-m")])  # crashed before the marker
        s.finish_submission(S, "done", "completed")
    # the process "crashed"; a new one starts over the same file
    with SQLiteStore(db) as s:
        recovered = s.recover_submissions(S)
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
        assert s.recover_submissions(S) == []  # only "not_applied" was running: reset again
        assert s.get_submission(S, "not_applied").status == "pending"
        assert ids(s.list_messages(S)).count("appended_unmarked-m") == 1


def test_recover_respects_stale_after(store: SQLiteStore) -> None:
    store.create_submission(S, [msg("m")], submission_id="live")
    store.claim_next_submission(S)
    assert store.recover_submissions(S, stale_after=3600) == []
    assert store.get_submission(S, "live").status == "running"
    assert store.recover_submissions(S) == []  # not applied: reset, nothing to return
    assert store.get_submission(S, "live").status == "pending"


def test_pending_session_ids(store: SQLiteStore) -> None:
    assert store.pending_session_ids() == []
    store.create_submission("a", [msg("1")], submission_id="a1")
    store.create_submission("b", [msg("1")], submission_id="b1")
    store.create_submission("c", [msg("1")], submission_id="c1")
    store.claim_next_submission("b")  # running still counts
    store.finish_submission("c", "c1", "skipped")
    assert store.pending_session_ids() == ["a", "b"]
    store.finish_submission("a", "a1", "completed")
    store.finish_submission("b", "b1", "error", "boom")
    assert store.pending_session_ids() == []


# ---------------------------------------------------------------- state


def test_state_key_value(db: Path) -> None:
    with SQLiteStore(db) as s:
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
    with SQLiteStore(db) as s:
        assert s.get_state(S, "body") == {"model": "m", "n": [1, 2.5, None, True], "t": "é"}
        assert s.get_state(S, "count") == 2
        assert s.get_state("other", "count") == 99
