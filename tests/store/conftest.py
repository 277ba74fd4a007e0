"""Store backends for the contract suite.

``store`` runs a test once per backend; ``store_factory`` makes several stores over one
database (for the cross-instance tests), so it runs only on backends that can share one.
The PostgreSQL backend needs ``THINK_TEST_POSTGRES_URL`` (see :mod:`tests.support.postgres`).

Both fixtures hand out a backend seen through the :class:`Store` protocol alone
(:class:`ProtocolOnly`): a contract test, or shared code it calls such as the submission
recovery, that reaches for a backend extra fails on every backend instead of passing on SQLite
and breaking on the next one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.postgres import drop_schema, postgres_url
from tests.support.stores import ProtocolOnly, StoreFactory
from think_core.store import SQLiteStore, Store

SHARED_BACKENDS = ["sqlite-file", "postgresql"]
ALL_BACKENDS = ["sqlite-file", "sqlite-memory", "postgresql"]

def _backend(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], Store]:
    if backend == "sqlite-file":
        path = tmp_path / "think.db"
        return lambda: SQLiteStore(path)
    if backend == "sqlite-memory":
        return lambda: SQLiteStore(":memory:")
    if backend == "postgresql":
        from think_core.store.postgres import PostgresStore

        url = postgres_url()
        schema = f"t_{uuid.uuid4().hex[:16]}"  # a schema of the test's own: nothing left from an earlier run
        request.addfinalizer(lambda: drop_schema(url, schema))
        return lambda: PostgresStore(url, schema=schema)
    raise ValueError(backend)


def _factory(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> StoreFactory:
    open_backend = _backend(backend, tmp_path, request)
    return lambda: ProtocolOnly(open_backend())


@pytest.fixture(params=SHARED_BACKENDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    return _factory(request.param, tmp_path, request)


@pytest.fixture(params=ALL_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with _factory(request.param, tmp_path, request)() as opened:
        yield opened  # type: ignore[misc]


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A schema name of this test's own on the test PostgreSQL server, dropped afterwards."""
    url = postgres_url()
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    drop_schema(url, name)
