"""Entry-point discovery against a real installed distribution (tests/data/sample_plugin).

The sample distribution is pip-installed into a temporary ``--target`` directory once per
session and put on ``sys.path`` (in-process) or ``PYTHONPATH`` (``think plugins``
subprocess) only by the tests that ask for it, so it never leaks into other tests.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.contexts import tool_ctx
from think_core import ConfigurationError, PluginLoadError, ScriptedModel, Think, block, hookimpl
from think_core.cli import main
from think_core.hooks.dispatch import HookDispatcher
from think_core.hooks.plugins import PluginInfo, build_plugin_manager

SAMPLE_SOURCE = Path(__file__).resolve().parents[1] / "data" / "sample_plugin"
SAMPLE_NAMES = ("sample_good", "sample_broken", "sample_tracked")
SAMPLE_DIST = "think-sample-plugin"
MARKER_ENV = "THINK_SAMPLE_IMPORT_MARKER"


def pip_install(tmp_path_factory: pytest.TempPathFactory, distribution: Path) -> Path:
    """``distribution`` (a source folder) installed with pip into a directory of its own."""
    source = tmp_path_factory.mktemp(f"{distribution.name}_src") / distribution.name
    shutil.copytree(distribution, source)  # building writes build/ and *.egg-info beside it
    target = tmp_path_factory.mktemp(f"{distribution.name}_site")
    subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
            "--no-build-isolation", "--disable-pip-version-check", "--target", str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return target


@pytest.fixture(scope="session")
def sample_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample distribution installed with pip into its own directory."""
    return pip_install(tmp_path_factory, SAMPLE_SOURCE)


def _forget_sample_modules() -> None:
    for module in [m for m in sys.modules if m.split(".")[0] == "think_sample_plugin"]:
        del sys.modules[module]


@pytest.fixture
def sample_env(
    sample_target: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Path]:
    """Make the sample distribution discoverable in-process; yields the import-marker path."""
    _forget_sample_modules()
    monkeypatch.syspath_prepend(str(sample_target))
    importlib.invalidate_caches()
    marker = tmp_path / "tracked-imported"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    yield marker
    _forget_sample_modules()
    importlib.invalidate_caches()


def other_entry_points() -> list[str]:
    """Entry points of group ``think`` not from the sample distribution (the bundled ones):
    disabled in these tests so their state cannot change what is being tested."""
    return [
        ep.name
        for ep in importlib.metadata.entry_points(group="think")
        if ep.dist is None or ep.dist.name != SAMPLE_DIST
    ]


def sample_infos(infos: list[PluginInfo]) -> dict[str, PluginInfo]:
    return {info.name: info for info in infos if info.name in SAMPLE_NAMES}


# -- in-process -----------------------------------------------------------------------------


def test_all_entry_points_listed_and_loaded_when_unrestricted(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("THINK_PLUGINS")
    with caplog.at_level(logging.WARNING, logger="think.plugins"):
        pm = build_plugin_manager(disable=other_entry_points(), broken_plugins="warn")
    infos = sample_infos(pm.plugin_infos)
    assert set(infos) == set(SAMPLE_NAMES)

    good = infos["sample_good"]
    assert (good.status, good.distribution, good.version, good.error) == (
        "loaded", SAMPLE_DIST, "0.3.1", None,
    )
    assert good.hooks == ("before_tool_call", "on_chunk")
    assert good.value == "think_sample_plugin.good:GoodPlugin"
    assert infos["sample_tracked"].status == "loaded"
    assert infos["sample_tracked"].hooks == ("on_step_finish",)
    assert sample_env.read_text() == "imported\n"

    broken = infos["sample_broken"]
    assert broken.status == "failed" and broken.hooks == ()
    assert broken.error == "RuntimeError: sample_broken cannot be imported"
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "sample_broken" in warning.getMessage()


async def test_entry_point_class_is_instantiated_per_manager_with_settings(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", "sample_good")
    first = build_plugin_manager(settings={"sample_good": {"blocked_tool": "deploy"}})
    second = build_plugin_manager()
    plugin_a, plugin_b = first.get_plugin("sample_good"), second.get_plugin("sample_good")
    assert type(plugin_a) is type(plugin_b) and plugin_a is not plugin_b

    decision = await HookDispatcher(first).before_tool_call(tool_ctx("deploy"))
    assert decision == block("deploy is blocked by sample_good")
    assert await HookDispatcher(second).before_tool_call(tool_ctx("deploy")) is None
    assert plugin_a.seen == ["deploy"] and plugin_b.seen == ["deploy"]


def test_bad_entry_point_settings_are_a_configuration_error(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", "sample_good")
    with pytest.raises(ConfigurationError, match="'sample_good'.*blocked_tool"):
        build_plugin_manager(settings={"sample_good": {"blocked_tool": ["not", "a", "str"]}})


def test_disabled_entry_point_is_not_imported(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("THINK_PLUGINS")
    monkeypatch.setenv("THINK_DISABLE_PLUGINS", ",".join(["sample_tracked", *other_entry_points()]))
    pm = build_plugin_manager(disable=["sample_broken"])
    infos = sample_infos(pm.plugin_infos)
    assert {name: info.status for name, info in infos.items()} == {
        "sample_good": "loaded",
        "sample_broken": "disabled",
        "sample_tracked": "disabled",
    }
    assert infos["sample_tracked"].hooks == ()
    assert infos["sample_tracked"].distribution == SAMPLE_DIST
    assert not sample_env.exists()
    assert "think_sample_plugin.tracked" not in sys.modules
    assert "think_sample_plugin.broken" not in sys.modules


def test_allow_list_loads_only_the_named_entry_points(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", " sample_good , sample_tracked ")
    pm = build_plugin_manager()
    statuses = {info.name: info.status for info in pm.plugin_infos}
    assert statuses.pop("sample_good") == statuses.pop("sample_tracked") == "loaded"
    assert set(statuses.values()) == {"disabled"}  # sample_broken and every other entry point
    assert "sample_broken" in statuses
    assert sample_env.exists()


def test_empty_allow_list_loads_no_entry_point(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", "")
    pm = build_plugin_manager()
    assert pm.get_plugins() == set()
    assert {info.status for info in pm.plugin_infos} == {"disabled"}
    assert not sample_env.exists()


def test_load_entrypoints_false_loads_none(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("THINK_PLUGINS")
    pm = build_plugin_manager(load_entrypoints=False)
    assert pm.plugin_infos == [] and pm.get_plugins() == set()
    assert not sample_env.exists()
    assert not [m for m in sys.modules if m.startswith("think_sample_plugin")]


async def test_explicit_plugins_come_after_entry_points_and_run_first(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Allower:
        name = "explicit_allower"

        @hookimpl
        def before_tool_call(self) -> None:
            return None

    monkeypatch.setenv("THINK_PLUGINS", "sample_good")
    pm = build_plugin_manager(plugins=[Allower()])
    loaded = [info.name for info in pm.plugin_infos if info.status == "loaded"]
    assert loaded == ["sample_good", "explicit_allower"]
    impls = pm.hook.before_tool_call.get_hookimpls()
    assert [impl.plugin_name for impl in reversed(impls)] == ["explicit_allower", "sample_good"]


def test_sample_distribution_does_not_leak(sample_target: Path) -> None:
    names = {ep.name for ep in importlib.metadata.entry_points(group="think")}
    assert names.isdisjoint(SAMPLE_NAMES)
    assert str(sample_target) not in sys.path


# -- the ``think plugins`` command ----------------------------------------------------------


def run_cli(
    sample_target: Path, tmp_path: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m think_core.cli plugins`` with only the sample distribution added."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("THINK_") and key != "PYTHONPATH"
    }
    environ.update(PYTHONPATH=str(sample_target), **{MARKER_ENV: str(tmp_path / "marker")}, **env)
    return subprocess.run(
        [sys.executable, "-m", "think_core.cli", "plugins", *args],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    )


def test_cli_json_lists_sample_plugins(sample_target: Path, tmp_path: Path) -> None:
    disable = ",".join(["sample_tracked", *other_entry_points()])
    result = run_cli(sample_target, tmp_path, "--json", THINK_DISABLE_PLUGINS=disable)
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert all(
        list(row) == ["name", "distribution", "version", "hooks", "status", "error"]
        for row in rows.values()
    )
    assert rows["sample_good"] == {
        "name": "sample_good",
        "distribution": SAMPLE_DIST,
        "version": "0.3.1",
        "hooks": ["before_tool_call", "on_chunk"],
        "status": "loaded",
        "error": None,
    }
    assert rows["sample_broken"]["status"] == "failed"
    assert rows["sample_broken"]["error"] == "RuntimeError: sample_broken cannot be imported"
    assert rows["sample_tracked"]["status"] == "disabled"
    assert rows["sample_tracked"]["hooks"] == []
    assert not (tmp_path / "marker").exists()
    assert "sample_broken" in result.stderr  # the import failure is reported


def test_cli_allow_list(sample_target: Path, tmp_path: Path) -> None:
    result = run_cli(sample_target, tmp_path, "--json", THINK_PLUGINS="sample_tracked")
    loaded = [row["name"] for row in json.loads(result.stdout) if row["status"] == "loaded"]
    assert loaded == ["sample_tracked"]
    assert (tmp_path / "marker").read_text() == "imported\n"


def test_cli_table(sample_target: Path, tmp_path: Path) -> None:
    result = run_cli(sample_target, tmp_path, THINK_PLUGINS="sample_good,sample_broken")
    lines = result.stdout.splitlines()
    assert any("sample_good" in line and "loaded" in line for line in lines)
    assert any("sample_broken" in line and "failed" in line for line in lines)
    assert any("sample_tracked" in line and "disabled" in line for line in lines)


def test_cli_plain_text_without_rich(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for module in ("rich", "rich.console", "rich.table"):
        monkeypatch.setitem(sys.modules, module, None)  # makes importing them fail
    monkeypatch.setenv("THINK_PLUGINS", "sample_good")
    assert main(["plugins"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        "name=sample_good  distribution=think-sample-plugin  version=0.3.1  "
        "hooks=before_tool_call, on_chunk  status=loaded  error=-"
    ) in lines
    assert (
        "name=sample_tracked  distribution=think-sample-plugin  version=0.3.1  "
        "hooks=-  status=disabled  error=-"
    ) in lines


# -- plugins that exit while loading ---------------------------------------------------------

EXITING_SOURCE = Path(__file__).resolve().parents[1] / "data" / "exiting_plugin"
EXITING_DIST = "think-exiting-plugin"
EXITING = "exits_on_import,exits_on_construct"


@pytest.fixture(scope="session")
def exiting_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The distribution whose plugins call ``sys.exit()`` while loading, pip-installed."""
    return pip_install(tmp_path_factory, EXITING_SOURCE)


def _forget_exiting_modules() -> None:
    for module in [m for m in sys.modules if m.split(".")[0] == "think_exiting_plugin"]:
        del sys.modules[module]


@pytest.fixture
def exiting_env(exiting_target: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    _forget_exiting_modules()
    monkeypatch.syspath_prepend(str(exiting_target))
    importlib.invalidate_caches()
    yield
    _forget_exiting_modules()
    importlib.invalidate_caches()


def test_a_plugin_that_exits_while_loading_is_listed_as_failed(
    exiting_env: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", EXITING)
    with caplog.at_level(logging.WARNING, logger="think.plugins"):
        pm = build_plugin_manager(broken_plugins="warn")
    infos = {info.name: info for info in pm.plugin_infos if info.status != "disabled"}
    assert {name: (info.status, info.distribution) for name, info in infos.items()} == {
        "exits_on_import": ("failed", EXITING_DIST),
        "exits_on_construct": ("failed", EXITING_DIST),
    }
    assert infos["exits_on_import"].error == "SystemExit: 3"
    assert infos["exits_on_construct"].error == "SystemExit: exits_on_construct refuses to start"
    warnings = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "exits_on_import" in warnings and "exits_on_construct" in warnings
    assert pm.get_plugins() == set()


@pytest.mark.parametrize("opt_out", ["argument", "environment"])
async def test_an_agent_opting_out_runs_although_a_plugin_exited_while_loading(
    exiting_env: None, monkeypatch: pytest.MonkeyPatch, opt_out: str
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", EXITING)
    if opt_out == "argument":
        agent = Think(ScriptedModel(["still here"]), broken_plugins="warn")
    else:
        monkeypatch.setenv("THINK_BROKEN_PLUGINS", "warn")
        agent = Think(ScriptedModel(["still here"]))
    try:
        result = await agent.session("s").chat("hello")
    finally:
        await agent.aclose()
    assert (result.status, result.text) == ("completed", "still here")
    assert {i.name for i in agent.plugin_manager.plugin_infos if i.status == "failed"} == set(EXITING.split(","))


def test_an_interrupt_while_a_plugin_loads_still_stops(
    exiting_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", "interrupted_on_import")
    with pytest.raises(KeyboardInterrupt):
        build_plugin_manager()


def test_cli_lists_a_plugin_that_exits_while_loading(exiting_target: Path) -> None:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("THINK_") and key != "PYTHONPATH"
    }
    environ.update(PYTHONPATH=str(exiting_target), THINK_PLUGINS=EXITING)
    result = subprocess.run(
        [sys.executable, "-m", "think_core.cli", "plugins", "--json"],
        env=environ,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["exits_on_import"]["status"] == rows["exits_on_construct"]["status"] == "failed"
    assert rows["exits_on_import"]["error"] == "SystemExit: 3"
    assert "exits_on_import" in result.stderr and "exits_on_construct" in result.stderr


# -- a broken plugin stops the agent unless the user opts out -------------------------------


def test_a_plugin_that_fails_to_import_stops_the_agent(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", "sample_good,sample_broken")
    with pytest.raises(PluginLoadError) as info:
        Think(ScriptedModel(["never"]))
    error = info.value
    assert isinstance(error, ConfigurationError)
    assert (error.plugin_name, error.distribution, error.hook, error.failed) == (
        "sample_broken", SAMPLE_DIST, "load", ("sample_broken",),
    )
    assert isinstance(error.error, RuntimeError) and error.__cause__ is error.error
    message = str(error)
    assert "'sample_broken'" in message and f"distribution {SAMPLE_DIST} 0.3.1" in message
    assert "entry point think_sample_plugin.broken" in message
    assert "RuntimeError: sample_broken cannot be imported" in message
    assert "THINK_BROKEN_PLUGINS=warn" in message and "THINK_DISABLE_PLUGINS=sample_broken" in message


def test_plugins_that_exit_while_loading_stop_the_agent_naming_each(
    exiting_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", EXITING)
    with pytest.raises(PluginLoadError) as info:
        build_plugin_manager()
    assert sorted(info.value.failed) == ["exits_on_construct", "exits_on_import"]
    assert isinstance(info.value.error, SystemExit)
    assert "SystemExit: 3" in str(info.value) and "exits_on_construct refuses to start" in str(info.value)


def test_an_explicit_error_mode_wins_over_the_environment(
    exiting_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THINK_PLUGINS", EXITING)
    monkeypatch.setenv("THINK_BROKEN_PLUGINS", "warn")
    with pytest.raises(PluginLoadError):
        Think(ScriptedModel([]), broken_plugins="error")


@pytest.mark.parametrize("value", ["ignore", ""])
def test_an_unknown_broken_plugins_mode_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    if value:
        monkeypatch.setenv("THINK_BROKEN_PLUGINS", value)
        with pytest.raises(ConfigurationError, match=r"\$THINK_BROKEN_PLUGINS must be 'error' or 'warn', not 'ignore'"):
            build_plugin_manager()
    else:
        with pytest.raises(ConfigurationError, match="broken_plugins must be 'error' or 'warn', not ''"):
            build_plugin_manager(broken_plugins=value)  # type: ignore[arg-type]


def test_cli_run_reports_a_broken_plugin_without_a_traceback(sample_target: Path, tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THINK_") and k != "PYTHONPATH"}
    environ.update(PYTHONPATH=str(sample_target), THINK_PLUGINS="sample_broken", THINK_HOME=str(tmp_path))
    args = [sys.executable, "-m", "think_core.cli", "run", "hi", "--model", "demo", "--db", str(tmp_path / "t.db")]
    done = subprocess.run(args, env=environ, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "'sample_broken'" in done.stderr and SAMPLE_DIST in done.stderr
    assert "RuntimeError: sample_broken cannot be imported" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""

    environ["THINK_BROKEN_PLUGINS"] = "warn"
    done = subprocess.run(args, env=environ, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "sample_broken" in done.stderr and done.stdout.strip()


def test_the_same_entry_point_listed_by_two_distributions_loads_once(
    sample_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Stale metadata (an egg-info left from a distribution's earlier name) lists the same entry
    points again; they are one plugin each, not a failure to register a second copy."""
    stale = tmp_path_factory.mktemp("stale") / "sample_plugin"
    shutil.copytree(SAMPLE_SOURCE, stale)
    pyproject = stale / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('name = "think-sample-plugin"', 'name = "think-sample-old"'))
    monkeypatch.syspath_prepend(str(pip_install(tmp_path_factory, stale)))
    importlib.invalidate_caches()
    dists = {ep.dist.name for ep in importlib.metadata.entry_points(group="think") if ep.name == "sample_good" and ep.dist}
    assert dists == {SAMPLE_DIST, "think-sample-old"}

    monkeypatch.setenv("THINK_PLUGINS", "sample_good,sample_tracked")
    pm = build_plugin_manager()
    loaded = [info.name for info in pm.plugin_infos if info.status == "loaded"]
    assert sorted(loaded) == ["sample_good", "sample_tracked"]
    assert not [info for info in pm.plugin_infos if info.status == "failed"]


def test_an_interrupt_while_a_plugin_loads_names_the_plugin(
    exiting_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Still an interrupt (above), and a load failure naming the plugin, also with "warn"."""
    monkeypatch.setenv("THINK_PLUGINS", "interrupted_on_import")
    monkeypatch.setenv("THINK_BROKEN_PLUGINS", "warn")
    with pytest.raises(PluginLoadError) as raised:
        build_plugin_manager()
    assert isinstance(raised.value, KeyboardInterrupt)
    assert raised.value.plugin_name == "interrupted_on_import" and "interrupted while loading" in str(raised.value)
