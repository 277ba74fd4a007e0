"""PostgreSQL's session locks and stream notifications, against a real server."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

psycopg = pytest.importorskip("psycopg")

from tests.support.postgres import postgres_url  # noqa: E402
from think_core.store._pg_shared import PgSessionLocks, listen_streams, notify_stream  # noqa: E402


@pytest.fixture
def pg_url() -> str:
    return postgres_url()


def test_a_session_lock_is_held_against_other_stores_until_released(pg_url: str) -> None:
    schema = f"locks_{uuid.uuid4().hex[:8]}"
    first, second = PgSessionLocks(pg_url, schema), PgSessionLocks(pg_url, schema)
    try:
        a, b = first.lock("s1"), second.lock("s1")
        assert a.try_acquire()
        assert not b.try_acquire()
        assert second.lock("s2").try_acquire()  # other sessions are not held up
        a.release()
        assert b.try_acquire()
        assert not a.try_acquire()
        b.release()
    finally:
        first.close()
        second.close()


def test_the_lock_of_a_dead_holder_is_free_at_once(pg_url: str) -> None:
    schema = f"locks_{uuid.uuid4().hex[:8]}"
    holder, other = PgSessionLocks(pg_url, schema), PgSessionLocks(pg_url, schema)
    try:
        assert holder.lock("s").try_acquire()
        assert not other.lock("s").try_acquire()
        holder.close()  # its connection ends, as when its process is killed
        # The server frees it as soon as it notices the connection is gone (asynchronously, so
        # poll: immediate on an idle machine, a little later on a busy one).
        deadline = time.monotonic() + 10
        while not other.lock("s").try_acquire():
            assert time.monotonic() < deadline, "the dead holder's lock was never freed"
            time.sleep(0.01)
    finally:
        other.close()


def test_schemas_do_not_share_locks(pg_url: str) -> None:
    one, two = PgSessionLocks(pg_url, "locks_one"), PgSessionLocks(pg_url, "locks_two")
    try:
        assert one.lock("s").try_acquire()
        assert two.lock("s").try_acquire()
    finally:
        one.close()
        two.close()


def test_listeners_hear_the_streams_other_stores_open(pg_url: str) -> None:
    schema = f"notes_{uuid.uuid4().hex[:8]}"
    heard: list[tuple[str, str]] = []
    got = threading.Event()

    def on_stream(session_id: str, stream_id: str) -> None:
        heard.append((session_id, stream_id))
        got.set()

    stop = listen_streams(pg_url, schema, "me", on_stream)
    try:
        with psycopg.connect(pg_url) as conn:
            notify_stream(conn, schema, "me", "s", "mine")  # our own: not news
            notify_stream(conn, f"{schema}_x", "other", "s", "elsewhere")  # another schema
            notify_stream(conn, schema, "other", "s", "theirs")
            assert heard == []  # nothing is delivered before the transaction commits
        assert got.wait(30)
    finally:
        stop()
    assert heard == [("s", "theirs")]


def test_a_listener_whose_connection_is_cut_listens_again(pg_url: str) -> None:
    schema = f"notes_{uuid.uuid4().hex[:8]}"
    heard: list[str] = []
    got = threading.Event()

    def on_stream(session_id: str, stream_id: str) -> None:
        heard.append(stream_id)
        got.set()

    stop = listen_streams(pg_url, schema, "me", on_stream)
    try:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            channel = f"think_streams_{schema}"
            cut = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE %s",
                (f'%LISTEN "{channel}"%',),
            ).fetchall()
            assert cut == [(True,)]  # the listener's own connection, as a database restart would
            deadline = time.monotonic() + 30
            while not got.is_set():  # announce until the listener, connected again, hears one
                assert time.monotonic() < deadline, "the listener never listened again"
                notify_stream(admin, schema, "other", "s", "after-the-cut")
                got.wait(0.5)
    finally:
        stop()
    assert set(heard) == {"after-the-cut"}
