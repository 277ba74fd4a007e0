"""Fixtures of the command-line tests: a ``THINK_HOME`` of the test's own (``home``) and a
directory of this environment's distributions for fresh virtual environments (``dependencies``)."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from tests.support.venv import OWN_NAMES


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture(scope="module")
def dependencies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This environment's installed distributions, minus this project, as a directory of links."""
    deps = tmp_path_factory.mktemp("deps")
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if entry.name.startswith(OWN_NAMES) or entry.suffix == ".pth":
            continue
        (deps / entry.name).symlink_to(entry)
    return deps
