"""Nothing is written to the current directory unasked, and no temporary folder is left behind:
files nobody named go to think's data directory (``$THINK_HOME`` here, set per test by the
conftest), the demo's files are removed when it ends."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from think_core import ScriptedModel, Think, data_dir


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


async def test_an_agent_with_the_bundled_plugins_writes_only_to_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("THINK_PLUGINS")  # the bundled plugins, analytics among them, load
    home = tmp_path / "home"
    monkeypatch.setenv("THINK_HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)

    agent = Think(ScriptedModel(["hello"]))
    assert not home.exists()  # building an agent writes nothing at all
    result = await agent.session("s").chat("hi")
    await agent.aclose()  # the analytics plugin flushes here

    assert result.status == "completed"
    assert files_under(work) == []
    assert data_dir() == home
    with sqlite3.connect(home / "analytics.db") as conn:
        kinds = {kind for (kind,) in conn.execute("SELECT kind FROM data_points")}
    assert kinds == {"step", "turn"}


def test_the_default_data_directory_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if sys.platform != "linux":
        pytest.skip("XDG_DATA_HOME is the Linux convention")
    monkeypatch.delenv("THINK_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "think"
    assert not (tmp_path / "xdg").exists()
    assert data_dir(create=True).is_dir()


def cli(cwd: Path, home: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")}
    env.update(THINK_HOME=str(home), TMPDIR=str(tmp))
    return subprocess.run(
        [sys.executable, "-m", "think_core.cli", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=env,
    )


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    work, home, tmp = tmp_path / "work", tmp_path / "home", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    return work, home, tmp


def test_think_run_keeps_conversations_in_the_data_directory(folders: tuple[Path, Path, Path]) -> None:
    work, home, tmp = folders
    done = cli(work, home, tmp, "run", "weather in Oslo?", "--model", "demo")
    assert done.returncode == 0, done.stderr
    assert "Oslo" in done.stdout
    assert files_under(work) == [] and files_under(tmp) == []
    assert (home / "think.db").is_file() and (home / "analytics.db").is_file()


def test_think_demo_leaves_no_temporary_folder(folders: tuple[Path, Path, Path]) -> None:
    work, home, tmp = folders
    done = cli(work, home, tmp, "demo", "--plain")
    assert done.returncode == 0, done.stderr
    assert "cache hit rate" in done.stdout  # the analytics report ran on the temporary files
    assert "think demo --db FILE keeps them" in done.stdout
    assert files_under(work) == [] and files_under(tmp) == [] and not home.exists()
