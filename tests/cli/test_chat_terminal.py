"""``think chat`` as a person uses it: in a pseudo-terminal (pexpect) for Ctrl-C and Ctrl-D,
through a pipe for what it prints (decisions, steps, retries). Every run is a real process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pexpect

from tests.loopback import LoopbackServer, Reply
from tests.support.wire import oa_text

CHAT = [sys.executable, "-m", "think_core.cli", "chat"]
#: Plain output (no colours, no cursor tricks) at a width that keeps lines whole.
ENV = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}


def spawn(tmp_path, *args: str) -> pexpect.spawn:
    child = pexpect.spawn(
        CHAT[0], [*CHAT[1:], "--model", "demo", "--db", str(tmp_path / "chat.db"), "--no-plugins", *args],
        env=ENV, encoding="utf-8", timeout=30, dimensions=(40, 200),
    )
    child.expect_exact("you> ")
    return child


def finish(child: pexpect.spawn) -> str:
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus, child.before)
    return child.before or ""


def test_ctrl_c_at_the_prompt_asks_again_and_a_second_one_quits(tmp_path):
    child = spawn(tmp_path)
    transcript = []
    child.sendintr()
    child.expect_exact("Ctrl-C again or Ctrl-D to quit")
    child.expect_exact("you> ")
    transcript.append(child.before)
    # The prompt still works after an interruption, and a new line resets the count.
    child.sendline("weather in Oslo?")
    child.expect_exact("Oslo: -3°C and snowing.")
    child.expect_exact("you> ")
    transcript.append(child.before)
    child.sendintr()
    child.expect_exact("Ctrl-C again or Ctrl-D to quit")
    child.expect_exact("you> ")
    child.sendintr()
    rest = finish(child)
    assert "Traceback" not in "".join(transcript) + rest
    assert "KeyboardInterrupt" not in "".join(transcript) + rest


def test_ctrl_d_quits_cleanly(tmp_path):
    child = spawn(tmp_path)
    child.sendeof()
    assert "Traceback" not in finish(child)


def test_ctrl_c_while_a_reply_streams_stops_it_and_keeps_the_part_said(tmp_path):
    child = spawn(tmp_path)
    child.sendline("hello")
    child.expect_exact("offline demo model")  # the introduction streams word by word
    child.sendintr()
    child.expect_exact("(stopped)")
    child.expect_exact("you> ")
    child.sendline("/history")
    child.expect_exact("you> ")
    history = child.before
    assert "I am the offline demo model" in history
    assert "keep what was said" not in history  # the end was never streamed
    child.sendline("/quit")
    assert "Traceback" not in finish(child)


def test_ctrl_c_at_an_approval_prompt_denies_the_call(tmp_path):
    child = spawn(tmp_path)
    child.sendline("email ada@example.com: lunch at one?")
    child.expect_exact("allow send_email(")
    child.sendintr()
    child.expect_exact("send_email: denied")
    child.expect_exact("did not send it")
    child.expect_exact("you> ")
    child.sendeof()
    assert "Traceback" not in finish(child)


def chat_through_a_pipe(tmp_path, lines: list[str], *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [*CHAT, "--db", str(tmp_path / "pipe.db"), *args],
        input="".join(line + "\n" for line in lines), capture_output=True, text=True, timeout=60,
        env={**ENV, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def test_blocked_calls_and_cache_hits_are_shown_as_such(tmp_path):
    out = chat_through_a_pipe(
        tmp_path,
        ["weather in Oslo?", "weather in Oslo again?", "note: buy oranges", "/quit"],
        "--model", "demo",
        env={"THINK_PLUGINS": "readonly_guard,tool_cache", "THINK_READONLY": "1"},
    )
    turns = out.split("you> ")
    assert '← get_weather {"city": "Oslo"' in turns[1]  # ran
    assert '↺ get_weather substituted by tool_cache (not run) {"city": "Oslo"' in turns[2]  # cache hit
    assert "⊘ save_note blocked by readonly_guard:" in turns[3]
    # The model explains with the guard's own reason (the demo no longer guesses at one).
    assert "I did not run save_note. Tool \"save_note\" was blocked: this session is in read-only mode" in turns[3]


def test_history_separates_the_steps_of_an_answer(tmp_path):
    out = chat_through_a_pipe(tmp_path, ["weather in Tokyo?", "/history", "/quit"], "--model", "demo")
    history = out.split("you> ")[2]
    lines = [line.strip() for line in history.splitlines()]
    assert lines[:2] == ["user: weather in Tokyo?", "assistant:"]
    step1, step2 = lines.index("step 1"), lines.index("step 2")
    assert any(line.startswith("get_weather {\"city\": \"tokyo\"}") for line in lines[step1:step2])
    assert "Here is what I found. Tokyo: 12°C and clear." in lines[step2:]


async def test_provider_retries_and_their_waits_are_shown(tmp_path):
    async with LoopbackServer() as server:
        server.enqueue(
            Reply.json({"error": {"message": "Rate limit reached", "type": "requests"}}, status=429, headers={"retry-after": "1"}),
            Reply.sse(oa_text("Fine ", "now.")),
        )
        process = await asyncio.create_subprocess_exec(
            *CHAT, "--model", f"openai-compatible:m@{server.url}/v1", "--db", str(tmp_path / "r.db"), "--no-plugins",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**ENV, "OPENAI_COMPATIBLE_API_KEY": "sk-test"},
        )
        out, err = await asyncio.wait_for(process.communicate(b"hi\n/quit\n"), 60)
    text = out.decode()
    assert process.returncode == 0, err.decode()
    assert "retrying in 1.0 s after 429 (attempt 1): openai-compatible HTTP 429: Rate limit reached" in text, text
    assert "Fine now." in text
    assert len(server.requests) == 2


async def test_history_shows_the_error_of_a_turn_that_failed_before_any_output(tmp_path):
    async with LoopbackServer() as server:
        server.enqueue(Reply.json({"error": {"message": "Incorrect API key provided: sk-bad.", "type": "invalid_request_error"}}, status=401))
        process = await asyncio.create_subprocess_exec(
            *CHAT, "--model", f"openai-compatible:m@{server.url}/v1", "--db", str(tmp_path / "e.db"), "--no-plugins",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**ENV, "OPENAI_COMPATIBLE_API_KEY": "sk-bad"},
        )
        out, err = await asyncio.wait_for(process.communicate(b"hi\n/history\n/quit\n"), 60)
    assert process.returncode == 0, err.decode()
    turn, history = out.decode().split("you> ")[1:3]
    assert "error: openai-compatible HTTP 401: Incorrect API key provided" in turn
    lines = history.splitlines()
    assert lines[0] == "user: hi"
    assert lines[1].startswith("  error: openai-compatible HTTP 401: Incorrect API key provided: sk-bad.")


async def test_a_fallback_names_the_model_that_answers_after_the_first_failed(tmp_path):
    from tests.support.wire import an_stream

    overloaded = Reply.json({"error": {"message": "The server is overloaded", "type": "server_error"}}, status=503)
    async with LoopbackServer() as first, LoopbackServer() as second:
        first.enqueue(*[overloaded] * 6)
        second.enqueue(Reply.sse(an_stream({"type": "text", "text": "Claude here."}, stop="end_turn",
                                           input_tokens=3, output_tokens=2)))
        config = tmp_path / "think.toml"
        config.write_text('[think]\ndisable = ["analytics", "otel", "tool_cache"]\n'
                          '[plugins.fallback]\nmodels = ["anthropic:claude-sonnet-4-5"]\n'
                          '[think.retry]\nmax_retries = 0\n', encoding="utf-8")
        process = await asyncio.create_subprocess_exec(
            *CHAT, "--model", f"openai-compatible:m@{first.url}/v1", "--db", str(tmp_path / "f.db"),
            "--config", str(config),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**ENV, "OPENAI_COMPATIBLE_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant",
                 "ANTHROPIC_BASE_URL": second.url},
        )
        out, err = await asyncio.wait_for(process.communicate(b"hi\n/quit\n"), 90)
    text = out.decode()
    assert process.returncode == 0, err.decode()
    assert "retrying on anthropic:claude-sonnet-4-5 after 503 (attempt 1)" in text, text
    assert "Claude here." in text
    assert len(second.requests) == 1


async def test_a_budget_refusal_is_shown_and_the_message_kept(tmp_path):
    config = tmp_path / "think.toml"
    config.write_text('[think]\ndisable = ["analytics", "otel", "tool_cache"]\n'
                      '[plugins.budget]\nsession_tokens = 1\n', encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        *CHAT, "--model", "demo", "--db", str(tmp_path / "b.db"), "--config", str(config),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
    )
    out, err = await asyncio.wait_for(process.communicate(b"hello\nagain\n/history\n/quit\n"), 90)
    text = out.decode()
    assert process.returncode == 0, err.decode()
    assert "session_tokens budget exhausted" in text, text
    assert "user: again" in text  # the refused turn's message is kept
