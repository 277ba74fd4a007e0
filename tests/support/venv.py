"""Fresh virtual environments for the packaging tests, offline: commands run as a user's shell
would (``run``, no ``THINK_``/``PIP_``/``PYTHON`` variables, checked to succeed), a new venv
that sees a directory of this environment's distributions (``fresh_venv``; the directory is the
``dependencies`` fixture of ``tests/cli/conftest.py``) and ``pip install`` into it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The distributions of this project (an environment's editable install included).
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


def fresh_venv(path: Path, dependencies: Path) -> Path:
    """A new virtual environment that sees ``dependencies``; returns its ``bin`` directory."""
    run([sys.executable, "-m", "venv", "--without-pip", path])
    bin_dir = path / "bin"
    site = run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout
    Path(site.strip(), "_test_dependencies.pth").write_text(f"{dependencies}\n")
    return bin_dir


def pip_into(bin_dir: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "--no-index", *args])
