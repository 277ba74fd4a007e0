"""The shape of the package a newcomer reads (issue 26): a few top-level modules beside the
concept packages, and no module too long to read in one sitting."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "think_core"
MAX_LINES = 450
MAX_TOP_LEVEL = 16


def test_at_most_sixteen_modules_sit_directly_under_think_core() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL, modules


def test_no_module_is_longer_than_450_lines() -> None:
    lengths = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}
    assert len(lengths) > 100  # the walk found the package
