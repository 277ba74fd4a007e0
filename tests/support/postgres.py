"""The PostgreSQL server the tests use: ``$THINK_TEST_POSTGRES_URL`` (``.ci/run`` starts one with
``bench/pg_local.sh``). Locally, without it, PostgreSQL tests skip saying why; in CI
(``CI=true``) that is a failure, never a skip."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

URL_ENV = "THINK_TEST_POSTGRES_URL"


def postgres_url() -> str:
    """The test server's URL, once psycopg is importable; else skip (fail under CI)."""
    url = os.environ.get(URL_ENV)
    missing = None
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        missing = "psycopg is not installed (pip install -e '.[postgres]')"
    if missing is None and not url:
        missing = f"${URL_ENV} is not set (start a server: url=$(bench/pg_local.sh start DIR))"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the PostgreSQL tests, but {missing}")
        pytest.skip(missing)
    assert url is not None
    return url


@contextmanager
def fresh_schema(url: str, prefix: str = "t") -> Iterator[str]:
    """A schema name no one used yet; the schema (if a store created it) is dropped afterwards."""
    import psycopg
    from psycopg import sql

    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        yield schema
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
