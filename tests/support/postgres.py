"""The PostgreSQL server the tests use: ``THINK_TEST_POSTGRES_URL`` (``.ci/run`` starts a
throw-away one). Without it PostgreSQL tests skip — except under CI, where they must run."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest


def postgres_url() -> str:
    url = os.environ.get("THINK_TEST_POSTGRES_URL")
    if url:
        return url
    if os.environ.get("CI") == "true":
        pytest.fail("THINK_TEST_POSTGRES_URL is not set under CI: .ci/run must start PostgreSQL for these tests")
    pytest.skip("THINK_TEST_POSTGRES_URL is not set (bench/pg_local.sh starts a throw-away PostgreSQL)")


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new, empty database on the test server (its URL), dropped afterwards."""
    import psycopg

    url = postgres_url()
    name = f"think_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(url)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A ``--db`` for ``think serve`` and the CLI, once per backend: a SQLite file in
    ``tmp_path``, or a fresh PostgreSQL database (:func:`fresh_database`). The suite's
    ``conftest.py`` offers it to every test; a test module's own ``db`` fixture wins."""
    if request.param == "sqlite":
        yield str(tmp_path / "chats.db")
        return
    with fresh_database() as url:
        yield url
