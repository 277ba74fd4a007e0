"""``think chat`` names the plugins that shaped a turn: who asked for an approval and why
(``ask``), which plugin rewrote a tool's result and which shaped the answer (``redact``)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from think_core import ToolCallContext, ask, hookimpl, tool
from think_core.agent import Think
from think_core.cli.chat import ChatREPL
from think_core.models.scripted import ScriptedModel, Step, call

ENV = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}


def test_a_redacted_answer_and_a_rewritten_result_name_the_plugin(tmp_path: Path) -> None:
    config = tmp_path / "think.toml"
    config.write_text('[plugins.redact]\npatterns = ["snow\\\\w*"]\ntool_results = true\n')
    done = subprocess.run(
        [sys.executable, "-m", "think_core.cli", "chat", "--model", "demo", "--db", str(tmp_path / "c.db"),
         "--config", str(config), "--plugins", "redact"],
        input="weather in Oslo?\n/quit\n", capture_output=True, text=True, timeout=60, env=ENV,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    out = done.stdout
    assert '← get_weather {"city": "Oslo", "temperature_c": -3, "sky": "[redacted]"}' in out
    assert "Oslo: -3°C and [redacted]." in out and "snow" not in out
    assert "(get_weather result rewritten by redact)" in out
    assert "(answer shaped by redact)" in out


@tool
def wire(to: str, amount: int) -> str:
    """Wire money."""
    return f"wired {amount} to {to}"


class WirePolicy:
    name = "wire_policy"

    @hookimpl
    def before_tool_call(self, ctx: ToolCallContext) -> Any:
        return ask(f"wires over 10 need a human ({ctx.input['amount']})") if ctx.input["amount"] > 10 else None


async def test_an_approval_a_plugin_asked_for_says_who_asked_and_why() -> None:
    model = ScriptedModel([Step(tool_calls=[call("wire", {"to": "bob", "amount": 50}, id="c1")]), "Sent."])
    prompts: list[str] = []

    async def read_line(prompt: str) -> str:
        prompts.append(prompt)
        return "y"

    out = io.StringIO()
    console = Console(file=out, width=200, no_color=True, force_terminal=False)
    async with Think(model, tools=[wire], plugins=[WirePolicy()], load_entrypoints=False) as agent:
        repl = ChatREPL(agent.session("s"), console, read_line)
        await repl.turn("wire bob 50")
    printed = out.getvalue()
    assert "asked by wire_policy: wires over 10 need a human (50)" in printed
    assert prompts == ['allow wire({"to": "bob", "amount": 50})? [y/N] ']
    assert printed.index("asked by wire_policy") < printed.index("Sent.")
    assert "← wire wired 50 to bob" in printed
