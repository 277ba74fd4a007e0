"""The built wheel, installed into fresh virtual environments, as a user would get it.

Offline: the wheel is built from a copy of the source tree, and the dependencies come from the
test's own environment through a directory of symbolic links (every distribution there except
this project's own, so the fresh environments never see the editable install). The example
plugin distribution, which depends on ``think-agent``, then pulls this project in from the
wheel directory alone (``--no-index --find-links``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import pytest

from think_core.hooks.markers import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PLUGIN = ROOT / "examples" / "think-example-plugin"
OWN_NAMES = ("think_core", "think_plugins", "think_agent", "__editable__")


def run(args: Sequence[str | Path], cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``args`` (by default in the root folder, so that ``think_core`` is never imported from
    the current directory by accident); the command must succeed."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THINK_", "PIP_", "PYTHON"))}
    environ.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PIP_CONFIG_FILE=os.devnull, **env)
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=environ, timeout=300,
                          cwd=cwd or Path("/"))
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done


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


def fresh_venv(path: Path, dependencies: Path) -> Path:
    """A new virtual environment that sees ``dependencies``; returns its ``bin`` directory."""
    run([sys.executable, "-m", "venv", "--without-pip", path])
    bin_dir = path / "bin"
    site = run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout
    Path(site.strip(), "_test_dependencies.pth").write_text(f"{dependencies}\n")
    return bin_dir


def pip_into(bin_dir: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "--no-index", *args])


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
    assert entry_points == ["analytics", "otel", "overflow_classifier", "readonly_guard", "tool_cache"]
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
