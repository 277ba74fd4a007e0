"""Plugins add ``think`` subcommands through ``register_commands``; the command line itself never
imports a plugin."""

from __future__ import annotations

import argparse
import ast
import logging
from pathlib import Path

import pluggy
import pytest

import think_core.cli as cli
from think_core import hookimpl
from think_core.cli import main, plugin_command
from think_core.hooks.plugins import ThinkPluginManager, build_plugin_manager

ROOT = Path(__file__).resolve().parents[2]


class Greeter:
    name = "greeter"

    def __init__(self) -> None:
        self.greeted: list[str] = []

    @hookimpl
    def register_commands(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        parser = subparsers.add_parser("greet", help="say hello")
        parser.add_argument("who")
        parser.set_defaults(func=self.greet)

    def greet(self, args: argparse.Namespace) -> int:
        self.greeted.append(args.who)
        return 0


class Later:
    name = "later"

    @hookimpl
    def register_commands(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        subparsers.add_parser("later", help="answer later").set_defaults(func=self.run)

    async def run(self, args: argparse.Namespace) -> int:
        return 3


def manager(*plugins: object) -> ThinkPluginManager:
    return build_plugin_manager(load_entrypoints=False, plugins=plugins)


def test_a_plugin_command_is_parsed_and_ready_to_run() -> None:
    greeter = Greeter()
    command = plugin_command(manager(greeter), ["greet", "ada"])
    assert command is not None
    assert command() == 0
    assert greeter.greeted == ["ada"]


def test_a_command_no_plugin_offers_is_none() -> None:
    pm = manager(Greeter())
    assert plugin_command(pm, ["farewell"]) is None
    assert plugin_command(pm, []) is None
    assert plugin_command(manager(), ["greet", "ada"]) is None


def test_a_raising_or_clashing_plugin_leaves_the_other_commands(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        name = "broken_commands"

        @hookimpl
        def register_commands(self) -> None:
            raise RuntimeError("no commands today")

    class Clash:
        name = "clashing_commands"

        @hookimpl
        def register_commands(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
            subparsers.add_parser("greet")  # taken by the greeter, which runs first (LIFO)

    greeter = Greeter()
    with caplog.at_level(logging.ERROR, logger="think.plugins"):
        command = plugin_command(manager(Clash(), Broken(), greeter), ["greet", "bob"])
    assert command is not None and command() == 0 and greeter.greeted == ["bob"]
    messages = [record.getMessage() for record in caplog.records]
    assert any("broken_commands" in m and "register_commands" in m for m in messages)
    assert any("clashing_commands" in m and "register_commands" in m for m in messages)


def test_an_async_register_commands_is_refused_at_registration() -> None:
    class AsyncCommands:
        name = "async_commands"

        @hookimpl
        async def register_commands(self, subparsers: object) -> None: ...

    with pytest.raises(pluggy.PluginValidationError, match="async_commands") as info:
        manager(AsyncCommands())
    assert "register_commands must be a plain def" in str(info.value)


def test_main_runs_plugin_commands_sync_and_async(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    greeter = Greeter()
    monkeypatch.setattr(cli, "_command_plugins", lambda: manager(greeter, Later()))
    assert main(["greet", "grace"]) == 0
    assert greeter.greeted == ["grace"]
    assert main(["later"]) == 3  # an async command runs in its own event loop
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    help_text = capsys.readouterr().out
    assert "greet" in help_text and "later" in help_text and "plugins" in help_text


def test_built_in_commands_do_not_ask_the_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> ThinkPluginManager:
        raise AssertionError("plugins were loaded for a built-in command")

    monkeypatch.setattr(cli, "_command_plugins", refuse)
    with pytest.raises(SystemExit) as exited:
        main(["plugins", "--help"])
    assert exited.value.code == 0


@pytest.mark.parametrize(
    "env",
    [{"THINK_PLUGINS": ""}, {"THINK_PLUGINS": "analytics", "THINK_DISABLE_PLUGINS": "analytics"}],
    ids=["not-allowed", "disabled"],
)
def test_a_plugin_the_environment_leaves_out_adds_no_command(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        main(["analytics", "report"])
    assert exited.value.code == 2
    assert "invalid choice: 'analytics'" in capsys.readouterr().err


def test_the_analytics_command_without_an_action_prints_its_usage(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", "analytics")
    assert main(["analytics"]) == 2
    assert "usage: think analytics report" in capsys.readouterr().err


def test_a_bad_config_file_leaves_the_built_in_commands_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "think.toml"
    bad.write_text("[think]\nunknown_key = 1\n")
    monkeypatch.setenv("THINK_CONFIG", str(bad))
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    captured = capsys.readouterr()
    assert "plugin commands are unavailable" in captured.err and "unknown_key" in captured.err
    assert "plugins" in captured.out


def test_the_engine_never_imports_think_plugins() -> None:
    offenders = []
    for path in sorted((ROOT / "think_core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = (
                [alias.name for alias in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            offenders += [f"{path.relative_to(ROOT)}: {name}" for name in names if name.split(".")[0] == "think_plugins"]
    assert offenders == []
