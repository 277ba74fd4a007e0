"""Store backends for the contract suite.

``store`` runs a test once per backend; ``store_factory`` makes several stores over one
database (for the cross-instance tests), so it runs only on backends that can share one.
A PostgreSQL backend joins both lists by its name (it needs ``THINK_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from think_core.store import SQLiteStore, Store

StoreFactory = Callable[[], Any]  # a Store that is also a context manager

SHARED_BACKENDS = ["sqlite-file", "postgresql"]
ALL_BACKENDS = ["sqlite-file", "sqlite-memory", "postgresql"]


def _factory(backend: str, tmp_path: Path) -> StoreFactory:
    if backend == "sqlite-file":
        path = tmp_path / "think.db"
        return lambda: SQLiteStore(path)
    if backend == "sqlite-memory":
        return lambda: SQLiteStore(":memory:")
    if backend == "postgresql":
        url = os.environ.get("THINK_TEST_POSTGRES_URL")
        try:
            from think_core.store.postgres import PostgresStore  # type: ignore[import-not-found]
        except ImportError:
            pytest.skip("no PostgreSQL store in this build")
        if not url:
            pytest.skip("THINK_TEST_POSTGRES_URL is not set")
        return lambda: PostgresStore(url, schema=f"t_{tmp_path.name[-40:]}".replace("-", "_"))
    raise ValueError(backend)


@pytest.fixture(params=SHARED_BACKENDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    return _factory(request.param, tmp_path)


@pytest.fixture(params=ALL_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with _factory(request.param, tmp_path)() as opened:
        yield opened
