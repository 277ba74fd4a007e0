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

from tests.loopback import LoopbackServer, RecordedRequest, Reply
from tests.support.serve import think_serve
from tests.support.web import user
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


async def test_serve_logs_one_warning_per_failed_turn_with_the_providers_message(tmp_path: Path) -> None:
    def refuse(request: RecordedRequest) -> Reply:
        return Reply.json({"error": {"message": "Incorrect API key provided: sk-***", "type": "invalid_request_error"}},
                          status=401)

    log = tmp_path / "serve.log"
    async with LoopbackServer(refuse) as provider:
        with log.open("wb") as stderr:
            args = ("--model", f"openai-compatible:m@{provider.url}/v1", "--db", str(tmp_path / "s.db"), "--no-plugins")
            async with think_serve(*args, stderr=stderr) as (_, base), httpx.AsyncClient(base_url=base, timeout=60) as http:
                for session in ("ops-a", "ops-b"):
                    payload = {"id": session, "messages": [user("hi", f"u-{session}")], "trigger": "submit-message"}
                    response = await http.post("/api/chat", json=payload)
                    assert response.status_code == 200 and '"type":"error"' in response.text, response.text
                deadline = asyncio.get_running_loop().time() + 60
                while log.read_text().count("turn failed") < 2:  # the server logs as the turn ends
                    assert asyncio.get_running_loop().time() < deadline, log.read_text()
                    await asyncio.sleep(0.05)
    failed = [line for line in log.read_text().splitlines() if "turn failed" in line]
    assert len(failed) == 2, log.read_text()
    for session, line in zip(("ops-a", "ops-b"), failed, strict=True):
        assert re.fullmatch(
            rf"think: WARNING think\.failures: turn failed: session {session} request req_\w+ \(fatal, stage \w+\): .*", line
        ), line
        assert "401" in line and "Incorrect API key provided" in line, line
