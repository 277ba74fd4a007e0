"""Tests of the SQLite persistence layer against real database files."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.messages import ids, msg, summary_text
from think_core.store import (
    COMPACTION_ROLE,
    SCHEMA_VERSION,
    SQLiteStore,
    Store,
    open_store,
)
from think_core.types import UIMessage

S = "session-1"


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
    made = [store.ensure_session(session) for session in ("b", "a", "b")]
    assert made == [True, True, False]  # True: this call made it
    store.append_messages("c", [msg("m")])  # writes create the session implicitly
    assert store.ensure_session("c") is False
    assert store.list_sessions() == ["b", "a", "c"]


def test_session_summaries_most_recently_active_first(store: SQLiteStore) -> None:
    store.append_messages("old", [msg("o1"), msg("o2")])
    store.ensure_session("empty")
    store.append_messages("new", [msg("n1")])
    store.upsert_message("old", msg("o1", "edited"))  # an update is activity too
    rows = store.session_summaries()
    assert [(r.session_id, r.messages) for r in rows] == [("old", 2), ("new", 1), ("empty", 0)]
    empty = rows[2]
    assert empty.updated_at == empty.created_at
    assert rows[0].updated_at >= rows[1].updated_at >= rows[0].created_at


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


# ---------------------------------------------------------------- compactions


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
    assert summary_text(hist[1]).endswith("second")
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




def test_a_version_1_database_is_migrated(db: Path) -> None:
    from think_core.store._sqlite_connection import _SCHEMA

    conn = sqlite3.connect(db)
    conn.executescript(_SCHEMA)  # the version-1 tables, as a version-1 build left them
    conn.execute("INSERT INTO sessions VALUES ('s', 0)")
    conn.execute(
        "INSERT INTO submissions (session_id, submission_id, status, messages, created_at, started_at, "
        "heartbeat_at) VALUES ('s', 'old', 'running', '[]', 0, 0, 0)"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with SQLiteStore(db) as s:
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        old = s.get_submission("s", "old")
        assert old.status == "running" and old.answer_message_id is None
        assert [r.submission_id for r in s.retake_stale_submissions("s", stale_after=30)] == ["old"]
        assert s.store_submission_answer("s", "old", msg("ans", role="assistant"), "completed") is True
