"""Types after a user's install: a user's program type-checks against ``think_core`` with mypy
and with pyright (strict), after the README's ``pip install -e`` and after a regular install.

An editable install made through an import hook is invisible to type checkers (mypy: "Cannot find
implementation or library stub"), so every ``think_core`` type in a user's code becomes ``Any``.
The installs here are made from a copy of the source tree into fresh virtual environments
(offline: the build backend and the dependencies come from this environment, see
``test_distribution``); the checkers then check a user file in an unrelated folder against them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.venv import ROOT, fresh_venv, pip_into

USER_CODE = """\
from think_core import Think, TurnConfig

agent = Think(model="scripted")
reveal_type(agent)
reveal_type(TurnConfig().temperature)
wrong: int = agent
"""

#: A small program using the public API as the README does (a tool, a plugin, a call's settings).
PYRIGHT_USER_CODE = """\
import asyncio

from think_core import Think, TurnConfig, TurnContext, hookimpl, tool


@tool
def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b


class Terse:
    @hookimpl
    def before_turn(self, ctx: TurnContext) -> TurnConfig:
        return TurnConfig(system="Be terse.", temperature=0.0)


async def main() -> None:
    async with Think("scripted", tools=[add], plugins=[Terse()]) as agent:
        result = await agent.session("s").chat("2 + 3?", config=TurnConfig(max_output_tokens=50))
        reveal_type(agent)
        reveal_type(result)
        reveal_type(TurnConfig().temperature)
        wrong: int = result.text
        print(wrong)


asyncio.run(main())
"""


def install(tmp_path: Path, dependencies: Path, *, editable: bool) -> Path:
    """This project installed from a copy of its sources into a fresh venv; its ``bin``."""
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("think_core", "think_plugins"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    bin_dir = fresh_venv(tmp_path / "venv", dependencies)
    pip_into(bin_dir, "--no-deps", "--no-build-isolation", *(["-e"] if editable else []), f"{source}[cli]")
    return bin_dir


@pytest.fixture(scope="module")
def readme_install(dependencies: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's install (``pip install -e '.[cli]'``)."""
    return install(tmp_path_factory.mktemp("editable"), dependencies, editable=True)


def user_folder(tmp_path: Path, code: str) -> Path:
    user = tmp_path / "user"
    user.mkdir()
    (user / "app.py").write_text(code)
    return user


def checker_env() -> dict[str, str]:
    # PYRIGHT_PYTHON_IGNORE_WARNINGS: the pyright wrapper would ask PyPI for a newer version.
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THINK_", "PYTHON", "MYPY"))}
    return {**environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"}


def test_mypy_sees_think_core_types_through_an_editable_install(readme_install: Path, tmp_path: Path) -> None:
    checked = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--python-executable",
                              str(readme_install / "python"), "app.py"],
                             cwd=user_folder(tmp_path, USER_CODE), env=checker_env(), capture_output=True,
                             text=True, timeout=300)
    out = checked.stdout + checked.stderr
    assert checked.returncode == 1, out  # exactly the one deliberate error below
    assert "Cannot find implementation" not in out, out
    assert 'Revealed type is "think_core.agent.Think"' in out, out
    assert 'Revealed type is "float | None"' in out, out
    # The deliberate mistake is caught: the types are real, not Any.
    assert 'app.py:6: error: Incompatible types in assignment (expression has type "Think"' in out, out


@pytest.mark.parametrize("how", ["editable", "regular"])
def test_pyright_strict_sees_think_core_types(
    how: str, readme_install: Path, dependencies: Path, tmp_path: Path
) -> None:
    """pyright in strict mode (an unknown type in the public API is an error there) finds the
    types through either install and reports exactly the user's deliberate mistake."""
    bin_dir = readme_install if how == "editable" else install(tmp_path / "regular", dependencies, editable=False)
    user = user_folder(tmp_path, PYRIGHT_USER_CODE)
    (user / "pyrightconfig.json").write_text(json.dumps({"typeCheckingMode": "strict"}))
    checked = subprocess.run([sys.executable, "-m", "pyright", "--outputjson", "--pythonpath",
                              str(bin_dir / "python"), "app.py"],
                             cwd=user, env=checker_env(), capture_output=True, text=True, timeout=300)
    assert checked.stdout.startswith("{"), checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    found = [(d["severity"], d["message"].splitlines()[0]) for d in report["generalDiagnostics"]]
    assert found == [
        ("information", 'Type of "agent" is "Think"'),
        ("information", 'Type of "result" is "TurnResult"'),
        ("information", 'Type of "TurnConfig().temperature" is "float | None"'),
        ("error", 'Type "str" is not assignable to declared type "int"'),
    ], found
