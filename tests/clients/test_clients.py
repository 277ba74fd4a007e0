"""Unchanged npm chat clients against a real ``think serve``: the AI SDK's ``useChat`` (with
``DefaultChatTransport``) and Cloudflare's ``useAgent`` + ``useAgentChat``, at the versions
``package-lock.json`` pins, driven by the node scripts beside this file exactly as a front end
would drive them (see each script for what it checks).

Locally they skip, saying why, without ``node`` or without ``npm ci`` in ``tests/clients``; in CI
(``CI=true``; ``.ci/run`` installs them) a missing client is a failure, never a skip.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

CLIENTS = Path(__file__).parent
NODE = shutil.which("node")
SCRIPT_TIMEOUT = 600  # seconds for all the checks of one script, on a busy machine


def _unavailable() -> str | None:
    if NODE is None:
        return "node is not installed (the client checks need Node.js 20+)"
    if not (CLIENTS / "node_modules" / "@cloudflare" / "ai-chat").is_dir() or not (CLIENTS / "node_modules" / "ai").is_dir():
        return "the npm clients are not installed: run `npm ci` in tests/clients"
    return None


def require_clients() -> None:
    """Skip (fail, in CI) when the npm clients cannot run here."""
    missing = _unavailable()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the npm client checks, but {missing}")
        pytest.skip(missing)


@pytest.fixture(scope="module")
def demo_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``think serve --model demo`` in a subprocess; its base URL."""
    require_clients()
    home = tmp_path_factory.mktemp("think-home")
    process, base = _start(home / "chats.db", home, delay=None)
    try:
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _announced_url(process: subprocess.Popen[str], log: Path) -> str:
    """The base URL from the server's first line (``--port 0`` picks a port)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = re.search(r"serving on (http://\S+)", log.read_text())
        if match:
            return match.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"think serve exited ({process.wait()}) or was silent before serving:\n{log.read_text()}")


def _wait_healthy(base: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{base}/healthz did not answer within 30 s")
        time.sleep(0.1)


@pytest.mark.parametrize(
    "script",
    [
        pytest.param("ai_sdk.mjs", id="ai-sdk-useChat"),
        pytest.param("agents.mjs", id="cloudflare-useAgentChat"),
    ],
)
def test_npm_client_against_think_serve(demo_server_url: str, script: str) -> None:
    failure = _run_script(demo_server_url, script)
    assert failure is None, failure


def _run_script(base: str, script: str) -> str | None:
    """``None`` when every check of ``script`` passed against ``base``, else its report."""
    assert NODE is not None
    done = subprocess.run(
        [NODE, str(CLIENTS / script)],
        cwd=CLIENTS, env={**os.environ, "THINK_URL": base},
        capture_output=True, text=True, timeout=SCRIPT_TIMEOUT,
    )
    checks = [line for line in done.stdout.splitlines() if line.startswith("ok ")]
    if done.returncode == 0 and len(checks) >= 6 and "FAIL" not in done.stdout:
        return None
    return done.stdout + done.stderr


#: Loaded runs of both client suites in the stress test ($THINK_LOADED_RUNS sets another count).
LOADED_RUNS = int(os.environ.get("THINK_LOADED_RUNS") or 20)


@pytest.mark.slow
def test_both_client_suites_hold_every_time_under_cpu_load(demo_server_url: str) -> None:
    """Issue 33: frame-ordering races show on a busy machine. A busy loop on each core, then
    both suites again and again: every check of every run holds (the sent message stays on
    screen, the status never goes ready before the stream, client and server ids are equal)."""
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(os.cpu_count() or 2)
    ]
    failures: list[str] = []
    try:
        for run in range(LOADED_RUNS):
            for script in ("ai_sdk.mjs", "agents.mjs"):
                failure = _run_script(demo_server_url, script)
                print(f"loaded run {run + 1} {script}: {'ok' if failure is None else 'FAIL'}", flush=True)
                if failure is not None:
                    failures.append(f"run {run + 1}, {script}:\n{failure}")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert not failures, f"{len(failures)} of {2 * LOADED_RUNS} loaded runs failed:\n" + "\n".join(failures)


def _start(db: Path, home: Path, port: int = 0, delay: str | None = "0.15") -> tuple[subprocess.Popen[str], str]:
    """``think serve --model demo`` on ``db``; its output goes to a file in ``home``, never to a
    pipe: a pipe nobody reads fills at 64 KiB of access log and then blocks the server's event
    loop on its next log line (which hung the loaded runs after a few hundred requests)."""
    env = {**os.environ, "THINK_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    if delay is not None:  # a slow answer (about 15 s at 0.15), still running when a page opens
        env["THINK_DEMO_DELAY"] = delay
    env.pop("THINK_API_TOKEN", None)
    log = home / f"serve-{time.monotonic_ns()}.log"
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "think_core.cli", "serve", "--model", "demo", "--port", str(port), "--db", str(db)],
            stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
        )
    base = _announced_url(process, log)
    _wait_healthy(base)
    return process, base


def _deltas(lines: Iterator[str], n: int) -> Iterator[str]:
    """The first ``n`` text-delta events of an SSE stream."""
    count = 0
    for line in lines:
        if '"text-delta"' in line:
            count += 1
            yield line
            if count == n:
                return
    raise AssertionError(f"the stream ended after {count} of {n} text deltas")


def test_a_page_opened_after_a_sigkill_and_restart_follows_the_resumed_turn(tmp_path: Path) -> None:
    """A chat whose page was reloaded mid-answer (its fetch closed) runs on, and one whose server
    is then SIGKILLed is resumed by the restarted server: one whole answer, stored once."""
    require_clients()
    assert NODE is not None
    db, home = tmp_path / "chats.db", tmp_path / "home"
    home.mkdir()
    first, base = _start(db, home)
    try:
        body = {"id": "crash", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}]}
        with httpx.Client(base_url=base, timeout=30) as http:
            with http.stream("POST", "/api/chat", json=body) as posted:
                for _ in _deltas(posted.iter_lines(), 3):
                    pass  # then the page is reloaded: its fetch is closed mid-answer
            # The turn ran on without its client: the reloaded page follows it from the start.
            with http.stream("GET", "/api/chat/crash/stream") as resumed:
                assert resumed.status_code == 200
                for _ in _deltas(resumed.iter_lines(), 8):
                    pass
                first.send_signal(signal.SIGKILL)  # mid-answer: the server dies
    finally:
        first.kill()
        first.wait()
    port = int(base.rsplit(":", 1)[1])
    second, base = _start(db, home, port)  # start-up recovery resumes the turn
    try:
        done = subprocess.run(
            [NODE, str(CLIENTS / "restart.mjs")],
            cwd=CLIENTS, env={**os.environ, "THINK_URL": base, "THINK_SESSION": "crash"},
            capture_output=True, text=True, timeout=SCRIPT_TIMEOUT,
        )
        assert done.returncode == 0 and done.stdout.startswith("ok "), done.stdout + done.stderr
    finally:
        second.terminate()
        second.wait(timeout=30)
