"""The read-only guard (think_plugins.readonly) through real turns with the scripted model."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.agents import make_agent
from tests.support.scripted import tool_results
from think_core import ConfigurationError, TurnConfig, hookimpl, substitute, tool
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call
from think_plugins.readonly import ReadOnlyGuard, ReadOnlyGuardSettings


class Tools:
    """Two read-only tools and two that change things; records what actually ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @tool(read_only=True)
        def read_file(path: str) -> str:
            """Read a file."""
            self.ran.append("read_file")
            return f"contents of {path}"

        @tool(read_only=True)
        def list_files() -> list[str]:
            """List files."""
            self.ran.append("list_files")
            return ["a.txt"]

        @tool(destructive=True)
        def delete_file(path: str) -> str:
            """Delete a file."""
            self.ran.append("delete_file")
            return f"deleted {path}"

        @tool(idempotent=True)
        def touch(path: str) -> str:
            """Create a file if missing (idempotent, but it writes)."""
            self.ran.append("touch")
            return f"touched {path}"

        self.all = [read_file, list_files, delete_file, touch]


def script(*names: str) -> ScriptedModel:
    """One step calling ``names`` (with a path argument where needed), then a final answer."""
    calls = [call(n, {} if n == "list_files" else {"path": "a.txt"}) for n in names]
    return ScriptedModel([Step(tool_calls=calls), "done"])


def guarded_agent(model: ScriptedModel, tools: Tools, *plugins: Any, settings: dict | None = None) -> Think:
    return make_agent(model, tools=tools.all, plugins=plugins, settings=settings)


async def test_off_by_default_everything_runs() -> None:
    tools, model = Tools(), script("delete_file", "read_file")
    agent = guarded_agent(model, tools, ReadOnlyGuard())
    result = await agent.session("s").chat("go")
    assert result.status == "completed"
    assert sorted(tools.ran) == ["delete_file", "read_file"]
    assert tool_results(model)["delete_file"].output == "deleted a.txt"


async def test_enabled_by_settings_blocks_non_read_only_tools_with_a_clear_reason() -> None:
    tools, model = Tools(), script("delete_file", "touch", "read_file")
    agent = guarded_agent(model, tools, ReadOnlyGuard(), settings={"readonly_guard": {"enabled": True}})
    result = await agent.session("s").chat("go")
    assert result.status == "completed"
    assert tools.ran == ["read_file"]
    results = tool_results(model)
    reason = results["delete_file"].output
    assert results["delete_file"].is_error is False
    assert reason.startswith('Tool "delete_file" was blocked: this session is in read-only mode')
    assert "Tools you may use: list_files, read_file." in reason
    assert results["touch"].output.startswith('Tool "touch" was blocked')
    assert results["read_file"].output == "contents of a.txt"


async def test_environment_variable_enables_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THINK_READONLY", "1")
    tools, model = Tools(), script("delete_file")
    await guarded_agent(model, tools, ReadOnlyGuard()).session("s").chat("go")
    assert tools.ran == []
    assert "read-only mode" in tool_results(model)["delete_file"].output


async def test_environment_variable_zero_leaves_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THINK_READONLY", "0")
    tools, model = Tools(), script("delete_file")
    await guarded_agent(model, tools, ReadOnlyGuard()).session("s").chat("go")
    assert tools.ran == ["delete_file"]


async def test_turn_body_enables_it_for_that_turn_only() -> None:
    tools = Tools()
    model = ScriptedModel(
        [Step(tool_calls=[call("delete_file", {"path": "a"})]), "no",
         Step(tool_calls=[call("delete_file", {"path": "a"})]), "yes"]
    )
    session = guarded_agent(model, tools, ReadOnlyGuard()).session("s")
    await session.chat("go", body={"read_only": True})
    assert tools.ran == []
    await session.chat("go again")
    assert tools.ran == ["delete_file"]


async def test_body_cannot_switch_off_operator_read_only_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    tools, model = Tools(), script("delete_file")
    agent = guarded_agent(model, tools, ReadOnlyGuard(), settings={"readonly_guard": {"enabled": True}})
    await agent.session("s").chat("go", body={"read_only": False})
    assert tools.ran == []

    monkeypatch.setenv("THINK_READONLY", "true")
    tools2, model2 = Tools(), script("delete_file")
    await guarded_agent(model2, tools2, ReadOnlyGuard()).session("s").chat("go", body={"read_only": False})
    assert tools2.ran == []


async def test_honor_body_false_ignores_the_body() -> None:
    tools, model = Tools(), script("delete_file")
    agent = guarded_agent(model, tools, ReadOnlyGuard(), settings={"readonly_guard": {"honor_body": False}})
    await agent.session("s").chat("go", body={"read_only": True})
    assert tools.ran == ["delete_file"]


async def test_allow_list_lets_a_named_tool_run_and_is_listed() -> None:
    tools, model = Tools(), script("touch", "delete_file")
    agent = guarded_agent(
        model, tools, ReadOnlyGuard(), settings={"readonly_guard": {"enabled": True, "allow": ["touch"]}}
    )
    await agent.session("s").chat("go")
    assert tools.ran == ["touch"]
    assert "Tools you may use: list_files, read_file, touch." in tool_results(model)["delete_file"].output


async def test_constructor_settings_win_over_missing_section() -> None:
    tools, model = Tools(), script("delete_file")
    guard = ReadOnlyGuard(settings=ReadOnlyGuardSettings(enabled=True))
    await guarded_agent(model, tools, guard).session("s").chat("go")
    assert tools.ran == []
    assert guard.settings.enabled is True


async def test_guard_runs_before_a_plugin_that_would_substitute() -> None:
    """tryfirst: a later-registered plugin (which pluggy would call first) cannot answer first."""

    class SubstituteEverything:
        name = "substitute_everything"

        @hookimpl
        def before_tool_call(self, ctx):
            return substitute("from the other plugin")

    tools, model = Tools(), script("delete_file", "read_file")
    agent = guarded_agent(
        model, tools, ReadOnlyGuard(), SubstituteEverything(),
        settings={"readonly_guard": {"enabled": True}},
    )
    await agent.session("s").chat("go")
    results = tool_results(model)
    assert results["delete_file"].output.startswith('Tool "delete_file" was blocked')
    assert results["read_file"].output == "from the other plugin"


async def test_reason_falls_back_when_before_turn_is_hidden() -> None:
    class DecidesTurn:
        name = "decides_turn"

        @hookimpl(tryfirst=True)
        def before_turn(self, ctx):
            return TurnConfig(max_steps=5)

    tools, model = Tools(), script("delete_file")
    agent = guarded_agent(model, tools, ReadOnlyGuard(), DecidesTurn(), settings={"readonly_guard": {"enabled": True}})
    await agent.session("s").chat("go")
    reason = tool_results(model)["delete_file"].output
    assert 'Tool "delete_file" was blocked: this session is in read-only mode' in reason
    assert "Only tools that are marked read-only may run." in reason
    assert tools.ran == []


def test_bad_settings_name_the_plugin_and_field() -> None:
    with pytest.raises(ConfigurationError, match="'readonly_guard'.*enabeld"):
        Think(
            ScriptedModel([]), plugins=[ReadOnlyGuard()], load_entrypoints=False,
            settings={"readonly_guard": {"enabeld": True}},
        )
