"""What a decision hook may answer: Think's camelCase keys work as they do in Think, and a key
that names nothing fails the turn closed, naming the plugin and the key."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from tests.support.docs import snippet
from think_core import PluginError, Think, hookimpl, tool
from think_core.models.scripted import ScriptedModel, Step, call


@tool(read_only=True)
def read(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


@tool(destructive=True)
def delete(path: str) -> str:
    """Delete a file."""
    raise AssertionError("never offered, never run")


class Answers:
    """A plugin whose hooks answer with the dicts a test gives it."""

    name = "answers"

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.errors: list[BaseException] = []

    @hookimpl
    def before_turn(self, ctx: Any) -> Any:
        return self.answers.get("before_turn")

    @hookimpl
    def before_step(self, ctx: Any) -> Any:
        return self.answers.get("before_step")

    @hookimpl
    def before_tool_call(self, ctx: Any) -> Any:
        return self.answers.get("before_tool_call")

    @hookimpl
    def on_chat_error(self, error: BaseException, ctx: Any) -> None:
        self.errors.append(error)


def answers_agent(model: ScriptedModel, plugin: Answers, tmp_path: Any) -> Think:
    return Think(model, tools=[read, delete], plugins=[plugin], load_entrypoints=False,
                 store=str(tmp_path / "think.db"))


async def test_a_think_style_before_turn_with_camel_case_keys_works_unchanged(tmp_path: Any) -> None:
    # {"activeTools": ["read"], "maxSteps": 1} once offered every tool and ran two steps.
    model = ScriptedModel([Step(text="Reading.", tool_calls=[call("read", {"path": "a.txt"})]), "never asked"])
    plugin = Answers(before_turn={"activeTools": ["read"], "maxSteps": 1, "instructions": "Be brief.",
                                  "stopSequences": ["END"], "maxOutputTokens": 50})
    result = await answers_agent(model, plugin, tmp_path).session("s").chat("read a.txt")
    assert result.status == "completed", result.error
    assert len(model.requests) == 1  # maxSteps: 1
    request = model.requests[0]
    assert [spec.name for spec in request.tools] == ["read"]
    assert request.system == "Be brief."
    assert request.settings.stop == ["END"] and request.settings.max_output_tokens == 50


async def test_a_step_config_takes_camel_case_too(tmp_path: Any) -> None:
    model = ScriptedModel(["Done."])
    plugin = Answers(before_step={"activeTools": [], "toolChoice": "none"})
    result = await answers_agent(model, plugin, tmp_path).session("s").chat("hi")
    assert result.status == "completed", result.error
    assert model.requests[0].tools == [] and model.requests[0].tool_choice == "none"


@pytest.mark.parametrize(
    ("hook", "answer", "key"),
    [
        ("before_turn", {"activeToolz": ["read"]}, "activeToolz"),
        ("before_turn", {"stopWhen": 3}, "stopWhen"),  # a Think setting think does not have
        ("before_step", {"active_tools": ["read"], "temperature": 0.2}, "temperature"),
    ],
)
async def test_an_unknown_key_fails_the_turn_naming_the_plugin_and_the_key(
    hook: str, answer: dict[str, Any], key: str, tmp_path: Any
) -> None:
    model = ScriptedModel([Step(tool_calls=[call("read", {"path": "a.txt"})]), "Done."])
    plugin = Answers(**{hook: answer})
    result = await answers_agent(model, plugin, tmp_path).session("s").chat("read a.txt")
    assert result.status == "error"
    [error] = plugin.errors
    assert isinstance(error, PluginError)
    assert "'answers'" in str(error) and hook in str(error) and key in str(error)
    assert not any("contents of" in str(m.content) for r in model.requests for m in r.messages)


async def test_an_unknown_key_in_a_tool_decision_keeps_the_call_from_running(tmp_path: Any) -> None:
    # As for a before_tool_call that raises: the call fails closed (not run, the model is told
    # why) and the turn goes on.
    model = ScriptedModel([Step(tool_calls=[call("read", {"path": "a.txt"})]), "Done."])
    plugin = Answers(before_tool_call={"action": "allow", "inputs": {"path": "b.txt"}})
    result = await answers_agent(model, plugin, tmp_path).session("s").chat("read a.txt")
    assert result.status == "completed", result.error
    [answer] = [m for m in model.requests[1].messages if m.role == "tool"]
    text = str(answer.output) + str(getattr(answer, "error", ""))
    assert "contents of" not in text
    assert "'answers'" in text and "inputs" in text


def test_the_porting_snippet_of_the_hook_reference_runs_unchanged(tmp_path: Any) -> None:
    code = snippet('"activeTools": ["read"]')
    env = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")}
    env["THINK_HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Read it."
