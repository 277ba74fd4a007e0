"""A plugin name that matches no plugin is an error that suggests the closest one, wherever the
user wrote it: ``disable=``, ``THINK_PLUGINS``, ``THINK_DISABLE_PLUGINS``, ``settings=``, think.toml."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from think_core import ConfigurationError, ScriptedModel, Think
from think_core.cli.config import load_config

# The bundled plugins are installed entry points in every environment these tests run in.
MISSPELT = r"no plugin named 'analytcs' \(did you mean 'analytics'\?\); the plugins here are: .*analytics"


def test_disable_names_an_unknown_plugin() -> None:
    with pytest.raises(ConfigurationError, match=f"disable: {MISSPELT}"):
        Think(ScriptedModel([]), disable=["analytcs"])


def test_disable_checks_names_even_without_entry_points() -> None:
    with pytest.raises(ConfigurationError, match="disable: no plugin named 'analytcs'"):
        Think(ScriptedModel([]), disable=["analytcs"], load_entrypoints=False)


@pytest.mark.parametrize("variable", ["THINK_PLUGINS", "THINK_DISABLE_PLUGINS"])
def test_environment_lists_name_unknown_plugins(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "tool_cache, analytcs")
    with pytest.raises(ConfigurationError, match=rf"\${variable}: {MISSPELT}"):
        Think(ScriptedModel([]))


def test_several_unknown_names_are_reported_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THINK_DISABLE_PLUGINS", "zzz,analytcs")
    with pytest.raises(ConfigurationError) as info:
        Think(ScriptedModel([]))
    assert "no plugins named 'analytcs' (did you mean 'analytics'?), 'zzz';" in str(info.value)


def test_settings_for_an_unknown_plugin() -> None:
    with pytest.raises(ConfigurationError, match=f"settings: {MISSPELT}"):
        Think(ScriptedModel([]), settings={"analytcs": {"sink": "jsonl"}})


def test_settings_may_name_an_installed_plugin_that_is_not_loaded() -> None:
    agent = Think(ScriptedModel([]), settings={"analytics": {"sink": "jsonl"}}, disable=["analytics"])
    agent.close()
    agent = Think(ScriptedModel([]), settings={"tool_cache": {"ttl_seconds": 5}}, load_entrypoints=False)
    agent.close()


def test_settings_may_name_an_explicit_plugin() -> None:
    class Mine:
        name = "mine"

    agent = Think(ScriptedModel([]), plugins=[Mine()], settings={"mine": {}}, load_entrypoints=False)
    assert agent.plugin_manager.has_plugin("mine")
    agent.close()


def test_think_toml_plugin_sections_and_disable_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "think.toml"
    path.write_text('[plugins.tool_cahce]\nttl_seconds = 5\n')
    with pytest.raises(ConfigurationError, match=r"\[plugins.NAME\]: no plugin named 'tool_cahce' \(did you mean 'tool_cache'\?\)"):
        load_config(str(path))
    path.write_text('[think]\ndisable = ["readonly"]\n')
    with pytest.raises(ConfigurationError, match=r"\[think\] disable: no plugin named 'readonly' \(did you mean 'readonly_guard'\?\)"):
        load_config(str(path))


def test_the_cli_reports_a_misspelt_name_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "think.toml").write_text('[plugins.tool_cahce]\nttl_seconds = 5\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")}
    env["THINK_HOME"] = str(tmp_path / "home")
    for command in (["run", "hi", "--model", "demo"], ["plugins"]):
        done = subprocess.run(
            [sys.executable, "-m", "think_core.cli", *command],
            capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
        )
        assert done.returncode != 0
        assert "think.toml: [plugins.NAME]: no plugin named 'tool_cahce' (did you mean 'tool_cache'?)" in done.stderr
        assert "Traceback" not in done.stderr
