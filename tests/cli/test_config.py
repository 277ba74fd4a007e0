"""think.toml: the command line's configuration file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from think_core.cli.config import load_config
from think_core.errors import ConfigurationError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "think.toml"
    path.write_text(text)
    return path


def test_a_full_file_is_read(tmp_path):
    path = write(
        tmp_path,
        """
[think]
model = "openai:gpt-4o-mini"
db = "chats.db"
max_steps = 4
disable = ["analytics"]
context_overflow = { reactive = true, max_retries = 2 }

[plugins.tool_cache]
backend = "sqlite"
path = "cache.db"
""",
    )
    config = load_config(str(path))
    assert config.think.model == "openai:gpt-4o-mini" and config.think.max_steps == 4
    assert config.think.context_overflow == {"reactive": True, "max_retries": 2}
    assert config.plugins == {"tool_cache": {"backend": "sqlite", "path": "cache.db"}}


def test_no_file_is_an_empty_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("THINK_CONFIG", raising=False)
    assert load_config().think.model is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[think]\nmodle = 'x'\n", "think.modle"),
        ("[think\n", "cannot read"),
        ("[think]\nmax_steps = 0\n", "think.max_steps"),
    ],
)
def test_bad_files_are_clear_errors(tmp_path, text, needle):
    with pytest.raises(ConfigurationError, match=needle.replace(".", r"\.")):
        load_config(str(write(tmp_path, text)))


def test_a_named_file_that_is_missing_is_an_error(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_config(str(tmp_path / "nope.toml"))


def think_in(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "THINK_PLUGINS"}  # the bundled plugins load
    return subprocess.run(
        [sys.executable, "-m", "think_core.cli", *args],
        input="", capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**base, "THINK_MODEL": "", **env},
    )


def test_the_cli_uses_the_files_model_and_plugin_settings(tmp_path):
    write(tmp_path, '[think]\nmodel = "demo"\ndb = "from-config.db"\n\n[plugins.tool_cache]\nttl_seconds = -1\n')
    done = think_in(tmp_path, "chat")
    # The plugin settings from the file are validated: a negative TTL stops start-up clearly.
    assert done.returncode == 2 and "tool_cache" in done.stderr and "ttl_seconds" in done.stderr


def test_the_cli_reads_model_and_db_from_the_file(tmp_path):
    write(tmp_path, '[think]\nmodel = "demo"\ndb = "from-config.db"\n')
    done = subprocess.run(
        [sys.executable, "-m", "think_core.cli", "chat"],
        input="weather in Oslo?\n/quit\n", capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "THINK_MODEL": "", "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    assert "Oslo: -3°C" in done.stdout
    assert (tmp_path / "from-config.db").exists()


def test_flags_win_over_the_file(tmp_path):
    write(tmp_path, '[think]\nmodel = "anthropic:claude-sonnet-4-5"\n')
    done = think_in(tmp_path, "run", "hi", "--model", "openai:gpt-4o-mini", OPENAI_API_KEY="", ANTHROPIC_API_KEY="")
    assert done.returncode == 2 and "OPENAI_API_KEY" in done.stderr


def test_think_plugins_applies_the_files_disable_list(tmp_path):
    import json

    write(tmp_path, '[think]\ndisable = ["analytics"]\n')
    done = think_in(tmp_path, "plugins", "--json")
    assert done.returncode == 0, done.stderr
    status = {row["name"]: row["status"] for row in json.loads(done.stdout)}
    assert status["analytics"] == "disabled" and status["tool_cache"] == "loaded"


def test_run_accepts_the_offline_demo_model(tmp_path):
    done = think_in(tmp_path, "run", "weather in Oslo?", "--model", "demo", "--no-plugins")
    assert done.returncode == 0, done.stderr
    assert "Oslo: -3°C and snowing." in done.stdout
