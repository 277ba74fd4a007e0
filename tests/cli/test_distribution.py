"""The built wheel, installed into fresh virtual environments, as a user would get it.

Offline: the wheel is built from a copy of the source tree, and the dependencies come from the
test's own environment through a directory of symbolic links (every distribution there except
this project's own, so the fresh environments never see the editable install). The example
plugin distribution, which depends on ``think-agent``, then pulls this project in from the
wheel directory alone (``--no-index --find-links``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.venv import ROOT, fresh_venv, pip_into, run
from think_core.hooks.markers import DISTRIBUTION

EXAMPLE_PLUGIN = ROOT / "examples" / "think-example-plugin"


@pytest.fixture(scope="module")
def wheel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding only the wheel of this project, built from a copy of the sources."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("think_core", "think_plugins"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    wheels = tmp_path_factory.mktemp("wheels")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation",
         "-w", wheels, source])
    return wheels


def test_the_wheel_installs_as_think_agent_with_the_think_command(
    wheel_dir: Path, dependencies: Path, tmp_path: Path
) -> None:
    [wheel] = wheel_dir.glob("*.whl")
    assert wheel.name.startswith("think_agent-")
    bin_dir = fresh_venv(tmp_path / "venv", dependencies)
    pip_into(bin_dir, "--no-deps", wheel)

    probe = (
        "import importlib.metadata as m, json, think_core; "
        "d = m.distribution('think-agent'); "
        "print(json.dumps([d.metadata['Name'], d.version, think_core.__file__, "
        "sorted(ep.name for ep in m.entry_points(group='think'))]))"
    )
    name, version, where, entry_points = json.loads(run([bin_dir / "python", "-c", probe]).stdout)
    assert name == DISTRIBUTION == "think-agent"
    assert where.startswith(str(tmp_path / "venv"))  # the installed copy, not the source tree
    assert entry_points == [
        "analytics", "budget", "fallback", "otel", "overflow_classifier", "readonly_guard", "redact", "tool_cache"
    ]
    assert (Path(where).parent / "py.typed").is_file()

    shown = run([bin_dir / "think", "--version"]).stdout
    assert shown.strip() == f"think, version {version} (think-agent)"


def test_a_plugin_that_depends_on_think_agent_installs_this_project(
    wheel_dir: Path, dependencies: Path, tmp_path: Path
) -> None:
    plugin = tmp_path / "plugin"
    shutil.copytree(EXAMPLE_PLUGIN, plugin)
    bin_dir = fresh_venv(tmp_path / "venv", dependencies)
    done = pip_into(bin_dir, "--no-build-isolation", "--find-links", wheel_dir, plugin)
    assert "think-agent" in done.stdout.replace("think_agent", "think-agent")

    rows = json.loads(run([bin_dir / "think", "plugins", "--json"], THINK_PLUGINS="tool_budget").stdout)
    budget = next(row for row in rows if row["name"] == "tool_budget")
    assert (budget["status"], budget["distribution"]) == ("loaded", "think-example-plugin")
    listing = run([sys.executable, "-m", "pip", "--python", bin_dir / "python", "list", "--format=json"]).stdout
    installed = {row["name"].lower(): row["version"] for row in json.loads(listing)}
    assert installed["think-agent"] == "0.1.0"
