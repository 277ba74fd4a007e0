"""Types after the README's install: ``pip install -e`` must leave ``think_core`` visible to mypy.

An editable install made through an import hook is invisible to type checkers (mypy: "Cannot find
implementation or library stub"), so every ``think_core`` type in a user's code becomes ``Any``.
The install here is the README's, made from a copy of the source tree into a fresh virtual
environment (offline: the build backend and the dependencies come from this environment, see
``test_distribution``); mypy then checks a user file in an unrelated folder against it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.venv import ROOT, fresh_venv, pip_into

USER_CODE = """\
from think_core import Think, TurnConfig

agent = Think(model="scripted")
reveal_type(agent)
reveal_type(TurnConfig().temperature)
wrong: int = agent
"""


def test_mypy_sees_think_core_types_through_an_editable_install(dependencies: Path, tmp_path: Path) -> None:
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("think_core", "think_plugins"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    bin_dir = fresh_venv(tmp_path / "venv", dependencies)
    pip_into(bin_dir, "--no-deps", "--no-build-isolation", "-e", f"{source}[cli]")

    user = tmp_path / "user"
    user.mkdir()
    (user / "app.py").write_text(USER_CODE)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THINK_", "PYTHON", "MYPY"))}
    checked = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--python-executable",
                              str(bin_dir / "python"), "app.py"],
                             cwd=user, env=environ, capture_output=True, text=True, timeout=300)
    out = checked.stdout + checked.stderr
    assert checked.returncode == 1, out  # exactly the one deliberate error below
    assert "Cannot find implementation" not in out, out
    assert 'Revealed type is "think_core.agent.Think"' in out, out
    assert 'Revealed type is "float | None"' in out, out
    # The deliberate mistake is caught: the types are real, not Any.
    assert 'app.py:6: error: Incompatible types in assignment (expression has type "Think"' in out, out
