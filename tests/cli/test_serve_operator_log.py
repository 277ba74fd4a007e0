"""``think serve`` shows an operator, without ``-v``, what needs their attention: the takeover of
a dead server's chats, and one WARNING line per failed turn (session, request id,
classification, the provider's message)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.loopback import LoopbackServer, Reply
from tests.support.serve import think_serve
from tests.support.web import user
from tests.support.wire import oa_text
from think_core.cli import serve


@pytest.fixture
def restored_loggers() -> Iterator[None]:
    """think's loggers put back as they were after the test (``serve._operator_log`` changes them)."""
    loggers = [logging.getLogger(name) for name in ("think", "think.submissions")]
    saved = [(list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    try:
        yield
    finally:
        for lg, (handlers, level, propagate) in zip(loggers, saved, strict=True):
            lg.handlers[:], lg.level, lg.propagate = handlers, level, propagate


def test_serve_shows_submission_takeovers_without_verbose(
    restored_loggers: None, capfd: pytest.CaptureFixture[str]
) -> None:
    serve._operator_log()  # here, not in a fixture: its handler writes to the test's captured stderr
    logging.getLogger("think.submissions").info("took over submission s1 of session c from vm pid 7: its process is gone")
    logging.getLogger("think.runner").info("a turn detail an operator does not need")
    err = capfd.readouterr().err
    assert "think: INFO think.submissions: took over submission s1" in err
    assert "turn detail" not in err


async def serve_two_turns(tmp_path: Path, provider: Reply, *flags: str) -> str:
    """``think serve`` (``flags`` added) over a provider giving ``provider`` to every request: two
    chats (sessions ops-a, ops-b) posted; its stderr once both turns have ended."""
    log = tmp_path / "serve.log"
    async with LoopbackServer(lambda request: provider) as model:
        with log.open("wb") as stderr:
            args = ("--model", f"openai-compatible:m@{model.url}/v1", "--db", str(tmp_path / "s.db"), "--no-plugins", *flags)
            async with think_serve(*args, stderr=stderr) as (_, base), httpx.AsyncClient(base_url=base, timeout=60) as http:
                for session in ("ops-a", "ops-b"):
                    payload = {"id": session, "messages": [user("hi", f"u-{session}")], "trigger": "submit-message"}
                    response = await http.post("/api/chat", json=payload)
                    assert response.status_code == 200, response.text
                deadline = asyncio.get_running_loop().time() + 60
                while log.read_text().count("on_chat_response") < 2 and log.read_text().count("turn failed") < 2:
                    assert asyncio.get_running_loop().time() < deadline, log.read_text()  # logged as each turn ends
                    await asyncio.sleep(0.05)
    return log.read_text()


async def test_serve_logs_one_warning_per_failed_turn_with_the_providers_message(tmp_path: Path) -> None:
    refusal = {"error": {"message": "Incorrect API key provided: sk-***", "type": "invalid_request_error"}}
    log = await serve_two_turns(tmp_path, Reply.json(refusal, status=401))
    failed = [line for line in log.splitlines() if "turn failed" in line]
    assert len(failed) == 2, log
    for session, line in zip(("ops-a", "ops-b"), failed, strict=True):
        assert re.fullmatch(
            rf"think: WARNING think\.failures: turn failed: session {session} request req_\w+ \(fatal, stage \w+\): .*", line
        ), line
        assert "401" in line and "Incorrect API key provided" in line, line
    assert "think.plugins.trace" not in log  # the hook timeline is -v's


async def test_serve_with_verbose_logs_every_hook_call(tmp_path: Path) -> None:
    log = await serve_two_turns(tmp_path, Reply.sse(oa_text("Hello.")), "-v")
    trace = [line for line in log.splitlines() if "think.plugins.trace" in line]
    hooks = [line.split("think.plugins.trace: ", 1)[1].split()[0] for line in trace]
    assert hooks.count("before_turn") == 2 and hooks.count("on_chat_response") == 2, log
    assert "turn failed" not in log
