"""Typed for its users: ``@tool`` keeps the function's type, ``ctx.tool`` is a ``Tool``, ``call``
is exported, the package ships ``py.typed``, and the README's offline snippet runs on its own."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import think_core
from think_core import Tool, call, tool
from think_core.models.scripted import ScriptedToolCall

ROOT = Path(__file__).resolve().parents[2]

# Checked by mypy below: the lines marked `# error` must be the only errors.
SNIPPET = '''
from collections.abc import Callable, Coroutine
from typing import Any, assert_type

from think_core import Tool, ToolCallContext, tool


@tool
def add(a: int, b: int = 1) -> int:
    """Add."""
    return a + b


@tool(read_only=True)
async def fetch(url: str) -> bytes:
    """Fetch."""
    return b""


as_function: Callable[[int, int], int] = add
as_tool: Tool[[str], Coroutine[Any, Any, bytes]] = fetch
anything: Tool[..., object] = add
assert_type(add(1, b=2), int)


async def body() -> bytes:
    return await fetch("https://example.org")


def guard(ctx: ToolCallContext) -> bool:
    return ctx.tool.annotations.read_only and ctx.tool.name != ""


add("one")  # error
wrong: Callable[[str], int] = add  # error
'''


def test_tool_keeps_the_function_type_for_mypy(tmp_path: Path) -> None:
    path = tmp_path / "uses_think.py"
    path.write_text(textwrap.dedent(SNIPPET))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
         "--hide-error-context", str(path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    error_lines = sorted(
        int(line.split(":")[1]) for line in done.stdout.splitlines() if ": error:" in line
    )
    expected = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line.endswith("# error")]
    assert error_lines == expected, done.stdout + done.stderr
    assert 'incompatible type "str"; expected "int"' in done.stdout


def test_a_tool_is_still_the_function_at_run_time() -> None:
    @tool(read_only=True)
    def get_weather(city: str, unit: str = "C") -> dict[str, str]:
        """Current weather for a city."""
        return {"city": city, "unit": unit}

    assert isinstance(get_weather, Tool) and get_weather.annotations.read_only
    assert get_weather("Oslo", unit="F") == {"city": "Oslo", "unit": "F"}  # positional too
    assert get_weather.__name__ == "get_weather" and get_weather.__doc__ == "Current weather for a city."
    signature = inspect.signature(get_weather)
    assert signature == inspect.signature(get_weather.function)
    assert list(signature.parameters) == ["city", "unit"]


def test_call_is_exported_and_the_package_is_typed() -> None:
    assert call("get_weather", {"city": "Lisbon"}) == ScriptedToolCall(name="get_weather", input={"city": "Lisbon"})
    assert "call" in think_core.__all__
    assert (Path(think_core.__file__).parent / "py.typed").is_file()


def readme_snippet(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    [block] = [b for b in blocks if marker in b]
    return block


def test_the_readme_scripted_model_snippet_runs_on_its_own(tmp_path: Path) -> None:
    code = readme_snippet("ScriptedModel([Step(tool_calls=[call(\"get_weather\"")
    env = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")}
    env["THINK_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "assert result.text ==" in code  # the snippet checks its own answer
    assert list(tmp_path.iterdir()) == []
