"""Shared test set-up.

Tests are hermetic by default: entry-point plugins are not loaded unless a test asks for them
(``monkeypatch.delenv("THINK_PLUGINS")``), so the bundled plugins installed with the package
do not change the behaviour of engine tests.
"""

from __future__ import annotations

import pytest

# The loopback HTTP server fixture (``loopback``) is available to every test.
pytest_plugins = ["tests.loopback"]


@pytest.fixture(autouse=True)
def _hermetic_plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THINK_PLUGINS", "")
    for name in ("THINK_DISABLE_PLUGINS", "THINK_TRACE_PLUGINS", "THINK_READONLY"):
        monkeypatch.delenv(name, raising=False)
