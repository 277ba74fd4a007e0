"""The store contract: finding a session's submissions by idempotency key, and by key prefix,
with indexed look-ups (a chat request does not scan the session's submissions)."""

from __future__ import annotations

import pytest

from tests.support.messages import msg
from think_core.store import Store

S = "session-1"


def test_a_submission_is_found_by_its_key(store: Store) -> None:
    row, _ = store.create_submission(S, [msg("m1")], idempotency_key="m1", metadata={"a": 1})
    store.create_submission(S, [msg("m2")], idempotency_key="m2")
    store.create_submission("other", [msg("m1")], idempotency_key="m3")
    assert store.get_submission_by_key(S, "m1") == row
    assert store.get_submission_by_key(S, "m3") is None  # scoped per session
    assert store.get_submission_by_key(S, "m") is None  # the whole key, not a prefix
    store.finish_submission(S, row.submission_id, "completed")
    found = store.get_submission_by_key(S, "m1")
    assert found is not None and found.status == "completed"
    assert store.get_submission_by_key("nobody", "m1") is None


def _keys(rows: list) -> list[str | None]:
    return [r.idempotency_key for r in rows]


def test_submissions_are_found_by_key_prefix_latest_first(store: Store) -> None:
    keys = [
        "continue:a:c1", "continue:a:c2,c3", "continue:ab:c1", "continue:a", "continue:a;x", "continue:a:",
        "continue:a:é", "continuez", "edit:a:123", "continue:a:\U0010ffff",
    ]
    for i, key in enumerate(keys):
        store.create_submission(S, [msg(f"m{i}")], idempotency_key=key)
    store.create_submission(S, [msg("no key")])
    store.create_submission("other", [msg("x")], idempotency_key="continue:a:c1")
    assert _keys(store.submissions_by_key_prefix(S, "continue:a:")) == [
        "continue:a:\U0010ffff", "continue:a:é", "continue:a:", "continue:a:c2,c3", "continue:a:c1"
    ]
    assert _keys(store.submissions_by_key_prefix(S, "continue:a:", limit=2)) == ["continue:a:\U0010ffff", "continue:a:é"]
    assert _keys(store.submissions_by_key_prefix(S, "edit:")) == ["edit:a:123"]
    assert store.submissions_by_key_prefix(S, "continue:b:") == []
    assert store.submissions_by_key_prefix("nobody", "continue:") == []
    # keys compare by code point, whatever order the database's collation gives text
    assert _keys(store.submissions_by_key_prefix(S, "continue:a:\U0010ffff")) == ["continue:a:\U0010ffff"]
    assert _keys(store.submissions_by_key_prefix(S, "CONTINUE:")) == []
    with pytest.raises(ValueError):
        store.submissions_by_key_prefix(S, "")
