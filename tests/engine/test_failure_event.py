"""A failed turn leaves one machine-readable ``chat:request:failed`` record on ``think.events``
(Think's diagnostics event), so an application can count and alert on failures without a plugin."""

from __future__ import annotations

import logging

import pytest

from tests.support.logs import failure_events
from think_core import ScriptedModel, Step
from think_core.agent import Think


async def test_a_failed_turn_emits_exactly_one_failure_event(caplog: pytest.LogCaptureFixture) -> None:
    model = ScriptedModel([Step(text="half an ", error=RuntimeError("upstream fell over"), error_after_output=True)])
    agent = Think(model, store=":memory:", load_entrypoints=False, retry={"max_retries": 0})
    try:
        with caplog.at_level(logging.INFO, logger="think.events"):
            result = await agent.session("s").chat("hi")
        assert result.status == "error"
        [record] = failure_events(caplog)
        assert record.levelno == logging.INFO
        assert record.__dict__["event"] == "chat:request:failed"
        assert record.__dict__["session_id"] == "s"
        assert record.__dict__["stage"] == "stream"
        assert record.__dict__["classification"] is None  # no plugin classified a bare RuntimeError
        assert isinstance(record.__dict__["request_id"], str) and record.__dict__["request_id"]
        assert record.__dict__["persisted"] is True  # the partial answer was kept
    finally:
        await agent.aclose()


async def test_a_completed_turn_emits_none(caplog: pytest.LogCaptureFixture) -> None:
    agent = Think(ScriptedModel(["fine"]), store=":memory:", load_entrypoints=False)
    try:
        with caplog.at_level(logging.INFO, logger="think.events"):
            result = await agent.session("s").chat("hi")
        assert result.status == "completed"
        assert failure_events(caplog) == []
    finally:
        await agent.aclose()
