"""Shared test set-up.

Tests are hermetic by default: entry-point plugins are not loaded unless a test asks for them
(``monkeypatch.delenv("THINK_PLUGINS")``), so the bundled plugins installed with the package
do not change the behaviour of engine tests, and ``THINK_HOME`` points at a fresh directory of
each test, so nothing is written to the user's data directory.
"""

from __future__ import annotations

import pytest

# The loopback HTTP server fixture (``loopback``) is available to every test.
pytest_plugins = ["tests.loopback"]


@pytest.fixture(autouse=True)
def _hermetic_plugin_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("THINK_PLUGINS", "")
    # think's data directory (default analytics and conversation files): never the user's own.
    monkeypatch.setenv("THINK_HOME", str(tmp_path_factory.mktemp("think-home")))
    for name in ("THINK_DISABLE_PLUGINS", "THINK_TRACE_PLUGINS", "THINK_READONLY"):
        monkeypatch.delenv(name, raising=False)
