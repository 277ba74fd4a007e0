"""What a user of llm expects of the ``think`` command: ``--version``, ``-v``, the hook trace on
stderr, a prompt from stdin, ``--plugins``, browsing stored conversations, and errors that say
what failed — never a traceback for a configuration mistake. Each runs the real command."""

from __future__ import annotations

import importlib.metadata
import json
import socket
from pathlib import Path

import pytest

from tests.support.cli import think
from think_core.models._transport import transport_choice


def test_version(tmp_path: Path, home: Path) -> None:
    done = think(tmp_path, home, "--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"think, version {importlib.metadata.version('think-agent')} (think-agent)"


def test_run_reads_the_prompt_from_stdin(tmp_path: Path, home: Path) -> None:
    done = think(tmp_path, home, "run", "--model", "demo", "--no-plugins", stdin="weather in Oslo?\n")
    assert done.returncode == 0, done.stderr
    assert "Oslo: -3°C and snowing." in done.stdout


def test_run_without_a_prompt_on_empty_stdin_says_so(tmp_path: Path, home: Path) -> None:
    done = think(tmp_path, home, "run", "--model", "demo", stdin="")
    assert done.returncode == 2
    assert "no prompt" in done.stderr


def test_trace_and_plugins_on_the_command_line(tmp_path: Path, home: Path) -> None:
    done = think(
        tmp_path, home, "run", "weather in Oslo?", "--model", "demo", "--plugins", "readonly_guard",
        THINK_TRACE_PLUGINS="1",
    )
    assert done.returncode == 0, done.stderr
    trace = [line for line in done.stderr.splitlines() if "think.plugins.trace" in line]
    assert any(line.endswith(tuple("0123456789")) and "before_tool_call plugin=readonly_guard" in line for line in trace)
    # --plugins: of the entry points only it; demo_policy is the demo model's own (--model demo).
    assert {line.split("plugin=")[1].split()[0] for line in trace} == {"readonly_guard", "demo_policy"}


def test_plugins_flag_names_an_unknown_plugin(tmp_path: Path, home: Path) -> None:
    done = think(tmp_path, home, "run", "hi", "--model", "demo", "--plugins", "readonly_gaurd")
    assert done.returncode == 2
    assert "--plugins: no plugin named 'readonly_gaurd' (did you mean 'readonly_guard'?)" in done.stderr


def test_sessions_and_history(tmp_path: Path, home: Path) -> None:
    assert think(tmp_path, home, "run", "weather in Oslo?", "--model", "demo", "--session", "oslo").returncode == 0
    assert think(tmp_path, home, "run", "hello there", "--model", "demo", "--session", "greet").returncode == 0

    listed = think(tmp_path, home, "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["session"], r["messages"], r["first"]) for r in rows] == [
        ("greet", 2, "hello there"),
        ("oslo", 2, "weather in Oslo?"),
    ]
    lines = think(tmp_path, home, "sessions").stdout.splitlines()
    assert lines[0].startswith("greet ") and "2 messages  hello there" in lines[0]

    shown = think(tmp_path, home, "history", "oslo")
    assert shown.returncode == 0, shown.stderr
    assert "user: weather in Oslo?" in shown.stdout
    assert '[tool get_weather({"city": "oslo"}) → {"city": "Oslo", "temperature_c": -3, "sky": "snowing"}]' in shown.stdout
    assert "Oslo: -3°C and snowing." in shown.stdout
    as_json = json.loads(think(tmp_path, home, "history", "oslo", "--json").stdout)
    assert [m["role"] for m in as_json] == ["user", "assistant"]

    missing = think(tmp_path, home, "history", "osl")
    assert missing.returncode == 1
    assert "no session 'osl'" in missing.stderr and "did you mean 'oslo'?" in missing.stderr


def test_browsing_without_a_database_creates_none(tmp_path: Path, home: Path) -> None:
    for command in (["sessions"], ["history", "cli"]):
        done = think(tmp_path, home, *command)
        assert done.returncode == 1
        assert f"no conversations stored yet: {home / 'think.db'} does not exist" in done.stderr
    assert not home.exists()


def test_an_unreachable_model_names_the_url(tmp_path: Path, home: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    args = ("hi", "--model", f"openai-compatible:m@{url}", "--no-plugins")
    done = think(tmp_path, home, "run", *args)
    assert done.returncode == 1
    assert f"(model endpoint {url}/chat/completions)" in done.stderr
    assert "INFO" not in done.stderr
    assert "turn failed" not in done.stderr  # the error is said once, by the command itself

    verbose = think(tmp_path, home, "run", "-v", *args)  # -v after the command works too
    assert verbose.returncode == 1
    assert "think: WARNING think.failures: turn failed: session cli request" in verbose.stderr
    # the transport's own words: think's (the fast extra) names the host and port
    refused = f"cannot connect to 127.0.0.1:{port}" if transport_choice() == "think" else "All connection attempts failed"
    assert f"(transient, stage stream): {refused}" in verbose.stderr


@pytest.mark.parametrize("command", [["run", "hi", "--model", "demo"], ["sessions"], ["plugins"], ["serve"]])
def test_a_broken_config_file_is_one_line_not_a_traceback(tmp_path: Path, home: Path, command: list[str]) -> None:
    (tmp_path / "think.toml").write_text("[think\nmodel = 1\n")
    done = think(tmp_path, home, *command)
    assert done.returncode in (1, 2)
    assert "think.toml" in done.stderr and "cannot read config file" in done.stderr
