"""The store contract: the end of a session's history and the messages waiting for the client,
read without reading the whole history (``message_window``), and one message by id
(``get_message``) — what a chat request looks up instead of every stored message. Also: the
``waiting`` mark is backfilled when an older database is migrated, on both backends."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.messages import msg
from think_core.store import SQLiteStore, Store
from think_core.types import UIMessage

S = "session-1"


def call(call_id: str, state: str, *, kind: str = "tool-get_weather") -> dict[str, Any]:
    part: dict[str, Any] = {"type": kind, "toolCallId": call_id, "state": state, "input": {}}
    if kind == "dynamic-tool":
        part["toolName"] = "lookup"
    if state == "output-available":
        part["output"] = 1
    return part


def assistant_message(message_id: str, *parts: dict[str, Any]) -> UIMessage:
    return UIMessage(id=message_id, role="assistant", parts=[{"type": "step-start"}, *parts])


def window_ids(store: Store, ids: list[str], *, before: int = 0, last: int = 0) -> list[str]:
    return [m.id for m in store.message_window(S, ids, before=before, last=last).messages]


def test_the_window_runs_from_the_first_named_message_to_the_end(store: Store) -> None:
    store.append_messages(S, [msg(f"m{i}") for i in range(8)])
    store.append_messages("other", [msg("o1"), msg("m2")])
    assert window_ids(store, ["m5"]) == ["m5", "m6", "m7"]
    assert window_ids(store, ["m6", "m3", "new"]) == ["m3", "m4", "m5", "m6", "m7"]  # the earliest, in stored order
    assert window_ids(store, ["m3"], before=1) == ["m2", "m3", "m4", "m5", "m6", "m7"]
    assert window_ids(store, ["m1"], before=3) == [f"m{i}" for i in range(8)]  # fewer before it: from the first
    assert window_ids(store, ["m6"], last=4) == ["m4", "m5", "m6", "m7"]  # at least the last 4
    assert window_ids(store, ["m2"], last=4) == ["m2", "m3", "m4", "m5", "m6", "m7"]
    assert window_ids(store, ["new", "o1"], before=1, last=2) == ["m6", "m7"]  # nothing named here: the last two
    assert window_ids(store, ["new"]) == []
    assert window_ids(store, [], last=20) == [f"m{i}" for i in range(8)]
    assert store.message_window("nobody", ["m1"], before=1, last=2).messages == []


def test_the_window_takes_any_number_of_ids(store: Store) -> None:
    store.append_messages(S, [msg(f"m{i}") for i in range(1300)])
    named = [f"x{i}" for i in range(1200)] + ["m1250", "m700"]  # more than one look-up's worth
    assert window_ids(store, named) == [f"m{i}" for i in range(700, 1300)]
    window = store.message_window(S, [f"m{i}" for i in range(1299, -1, -1)])
    assert window.messages == store.list_messages(S)


def test_the_window_holds_the_messages_with_calls_waiting_for_the_client(store: Store) -> None:
    store.append_messages(S, [
        msg("u1"),
        assistant_message("a1", call("c1", "input-available")),
        msg("u2"),
        assistant_message("a2", call("c2", "output-available"), {"type": "text", "text": "done"}),
        msg("u3"),
        assistant_message("a3", call("c3", "approval-requested"), call("c4", "output-available")),
        msg("u4"),
    ])
    window = store.message_window(S, ["u4"], last=1)
    assert [m.id for m in window.messages] == ["u4"]
    assert [m.id for m in window.waiting] == ["a1", "a3"]  # wherever they are, in order
    assert window.waiting[1] == store.list_messages(S)[5]
    store.upsert_message(S, assistant_message("a1", call("c1", "output-available")))  # answered
    store.upsert_message(S, assistant_message("a2", call("c2", "output-available"), call("c5", "approval-responded")))
    store.append_messages(S, [assistant_message("a4", call("c6", "input-available", kind="dynamic-tool"))])
    assert [m.id for m in store.message_window(S).waiting] == ["a2", "a3", "a4"]
    store.delete_messages(S, ["a3"])
    assert [m.id for m in store.message_window(S).waiting] == ["a2", "a4"]
    assert store.message_window("other").waiting == []
    store.clear_messages(S)
    assert store.message_window(S, last=5) == store.message_window("other")


def test_only_an_assistant_message_waits(store: Store) -> None:
    # The server writes the assistant's messages: a user message shaped like a tool part is not a call.
    store.append_messages(S, [UIMessage(id="u1", role="user", parts=[call("c1", "input-available")])])
    assert store.message_window(S).waiting == []


def test_a_submission_applied_marks_its_waiting_messages(store: Store) -> None:
    row, _ = store.create_submission(S, [msg("u1"), assistant_message("a1", call("c1", "approval-requested"))])
    assert store.message_window(S).waiting == []
    store.apply_submission_messages(S, row.submission_id)
    assert [m.id for m in store.message_window(S).waiting] == ["a1"]


def test_the_window_is_the_end_of_the_history_for_any_history(store: Store) -> None:
    """Against the definition, on random histories: the window is ``list_messages()[k:]`` for
    the k the arguments name, and ``waiting`` every assistant message with a waiting call."""
    rng = random.Random(26)
    states = ["input-available", "approval-requested", "approval-responded", "output-available", "output-error"]
    for round_ in range(12):
        session = f"s{round_}"
        for i in range(rng.randrange(0, 30)):
            if rng.random() < 0.5:
                store.append_messages(session, [msg(f"{session}-{i}")])
            else:
                parts = [call(f"{session}-c{i}-{j}", rng.choice(states)) for j in range(rng.randrange(0, 3))]
                store.append_messages(session, [assistant_message(f"{session}-{i}", *parts)])
        stored = store.list_messages(session)
        if stored and rng.random() < 0.5:
            store.delete_messages(session, [rng.choice(stored).id])
            stored = store.list_messages(session)
        ids = [m.id for m in stored]
        named = rng.sample(ids, min(len(ids), rng.randrange(0, 4))) + ["unknown"]
        before, last = rng.randrange(0, 3), rng.randrange(0, 4)
        starts = [max(0, min(ids.index(n) for n in named if n in ids) - before)] if set(named) & set(ids) else []
        if last:
            starts.append(max(0, len(ids) - last))
        expected = stored[min(starts):] if starts else []
        window = store.message_window(session, named, before=before, last=last)
        assert window.messages == expected, (named, before, last)
        waiting = [
            m for m in stored
            if m.role == "assistant" and any(p.get("state") in states[:3] for p in m.parts if "toolCallId" in p)
        ]
        assert window.waiting == waiting


def test_a_message_is_found_by_its_id(store: Store) -> None:
    store.append_messages(S, [msg("u1"), assistant_message("a1", {"type": "text", "text": "hi"})])
    store.append_messages("other", [msg("o1")])
    assert store.get_message(S, "a1") == store.list_messages(S)[1]
    assert store.get_message(S, "o1") is None  # scoped per session
    assert store.get_message(S, "nope") is None


# ---------------------------------------------------------------- migrations


WAITING = assistant_message("a1", call("c1", "approval-requested"))
ANSWERED = assistant_message("a2", call("c2", "output-available"))


def _old_rows(execute: Any, placeholder: str) -> None:
    """Messages as a database from before the ``waiting`` mark holds them."""
    for seq, message in enumerate([msg("u1"), WAITING, ANSWERED]):
        execute(
            "INSERT INTO messages (session_id, message_id, role, parts, metadata, created_at, updated_at) "
            f"VALUES ({', '.join([placeholder] * 7)})",
            ("s", message.id, message.role, json.dumps(message.parts), None, seq, seq),
        )


def _drop_history_revisions(execute: Any) -> None:
    """Take off what a later version (the history revisions, ``HISTORY_REVISIONS``) added."""
    execute("DROP INDEX messages_by_rev")
    for table, column in (("messages", "rev"), ("sessions", "history_rev"), ("sessions", "history_reset")):
        execute(f"ALTER TABLE {table} DROP COLUMN {column}")


def test_a_version_5_sqlite_database_gets_its_waiting_messages_marked(tmp_path: Path) -> None:
    db = tmp_path / "think.db"
    SQLiteStore(db).close()
    conn = sqlite3.connect(db)
    _drop_history_revisions(conn.execute)
    conn.execute("DROP INDEX messages_waiting")
    conn.execute("ALTER TABLE messages DROP COLUMN waiting")  # as version 5 left the table
    conn.execute("INSERT INTO sessions VALUES ('s', 0)")
    _old_rows(conn.execute, "?")
    conn.execute("PRAGMA user_version = 5")
    conn.commit()
    conn.close()
    with SQLiteStore(db) as store:
        assert [m.id for m in store.message_window("s").waiting] == ["a1"]
        assert store.message_window("s").waiting[0] == WAITING


def test_a_version_2_postgres_schema_gets_its_waiting_messages_marked(pg_schema: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    from tests.support.postgres import postgres_url
    from think_core.store.postgres import PostgresStore

    url = postgres_url()
    PostgresStore(url, schema=pg_schema).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{pg_schema}"')
        _drop_history_revisions(conn.execute)
        conn.execute("DROP INDEX messages_waiting")
        conn.execute("ALTER TABLE messages DROP COLUMN waiting")  # as version 2 left the table
        conn.execute("INSERT INTO sessions (session_id, created_at) VALUES ('s', 0)")
        _old_rows(conn.execute, "%s")
        conn.execute("UPDATE think_schema_version SET version = 2")
    with PostgresStore(url, schema=pg_schema) as store:
        assert [m.id for m in store.message_window("s").waiting] == ["a1"]
        assert store.message_window("s").waiting[0] == WAITING
