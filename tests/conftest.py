"""Fixtures for the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.agents import make_agent

#: Fixtures shared across folders: ``db`` (a SQLite file or a fresh PostgreSQL database).
pytest_plugins = ["tests.support.postgres"]


@pytest.fixture(autouse=True)
def _close_built_agents() -> Iterator[None]:
    """Every agent ``make_agent`` built during a test is closed after it."""
    yield
    make_agent.close()
