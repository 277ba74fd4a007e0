"""The ``think`` command line, run as a user would run it (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys


def think_with_env(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "think_core.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_demo_runs_offline_with_the_bundled_plugins(tmp_path, monkeypatch):
    monkeypatch.delenv("THINK_PLUGINS")
    db = tmp_path / "demo.db"
    done = think_with_env("demo", "--plain", "--db", str(db))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for plugin in ("readonly_guard (loaded)", "tool_cache (loaded)", "analytics (loaded)", "overflow_classifier (loaded)",
                   "otel (loaded)"):
        assert plugin in out
    assert "get_weather({'city': 'lisbon'}) → allow" in out
    assert "get_weather({'city': 'lisbon'}) → substitute" in out  # the cached answer
    assert "save_note({'text': 'buy oranges'}) → block" in out  # read-only mode
    # The decisions stand on the before_tool_call lines, where they are taken, with their plugin.
    assert "before_tool_call   get_weather({'city': 'lisbon'}) → substitute by tool_cache" in out
    assert "before_tool_call   save_note({'text': 'buy oranges'}) → block by readonly_guard" in out
    # The model's explanation is the guard's own reason, not a guess.
    assert "I did not run save_note." in out and "this session is in read-only mode" in out
    assert "context overflow classified by overflow_classifier → compacted" in out
    # A plugin asks a human before a note with a phone number is saved; redact masks the result.
    assert "save_note waits for a human (asked by demo_policy: notes with a phone number need a human)" in out
    assert "saved: call Ana on [redacted]" in out and "saved: call Ana on 555" not in out
    assert "a tool result was rewritten by redact" in out and "the answer's stream was shaped by redact" in out
    # Five turns and the approval's continuation; the overflowing turn recovered.
    assert out.count("status=completed") == 6
    assert "cache hit rate" in out  # the analytics summary
    assert f"conversation stored in {db}" in out
    assert db.exists() and (tmp_path / "analytics.db").exists()


def test_run_without_a_model_is_a_clear_error():
    done = think_with_env("run", "hello", env={"THINK_MODEL": ""})
    assert done.returncode == 2
    assert "no model" in done.stderr


def test_run_with_a_missing_api_key_fails_before_any_request(tmp_path):
    env = {"OPENAI_API_KEY": "", "THINK_MODEL": ""}
    done = think_with_env("run", "hello", "--model", "openai:gpt-4o-mini", "--db", str(tmp_path / "x.db"), env=env)
    assert done.returncode == 2
    assert "OPENAI_API_KEY" in done.stderr


def test_chat_repl_streams_answers_and_shows_history(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "think_core.cli", "chat", "--model", "demo", "--db", str(tmp_path / "c.db")],
        input="What's the weather in Oslo?\n/history\n/reset\n/history\n/quit\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert '→ get_weather {"city": "oslo"}' in out
    assert "Oslo: -3°C and snowing." in out
    prompts = out.split("you> ")
    assert prompts[2].startswith("user: What's the weather in Oslo?")  # /history
    assert prompts[3].startswith("history cleared")  # /reset
    assert prompts[4].startswith("(no messages)")  # /history after the reset
