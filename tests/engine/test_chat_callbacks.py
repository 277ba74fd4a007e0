"""``session.chat()`` takes the callbacks of Think's sub-agent ``chat()``: ``on_start``,
``on_event``, ``on_done``, ``on_error``, each plain or async; ``on_error`` gets the error
instead of the call raising."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from think_core import ScriptedModel, Step, hookimpl
from think_core.agent import Think
from think_core.types import TurnResult


def scripted_agent(*steps: Any, plugins: list[Any] | None = None) -> Think:
    return Think(ScriptedModel(list(steps)), store=":memory:", load_entrypoints=False, plugins=plugins or [],
                 retry={"max_retries": 0})


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_callbacks_see_start_every_chunk_and_done(flavour: str) -> None:
    seen: list[Any] = []
    agent = scripted_agent("Hello there")

    if flavour == "sync":
        def on_start(request_id: str) -> None:
            seen.append(("start", request_id))

        def on_event(chunk: dict[str, Any]) -> None:
            seen.append(chunk["type"])

        def on_done(result: TurnResult) -> None:
            seen.append(("done", result.text))
    else:
        async def on_start(request_id: str) -> None:
            seen.append(("start", request_id))

        async def on_event(chunk: dict[str, Any]) -> None:
            await asyncio.sleep(0)  # a consumer that yields: the chunks still arrive in order, before done
            seen.append(chunk["type"])

        async def on_done(result: TurnResult) -> None:
            seen.append(("done", result.text))

    try:
        result = await agent.session("s").chat("hi", on_start=on_start, on_event=on_event, on_done=on_done,
                                               on_error=lambda e: seen.append(("error", e)), request_id="r1")
    finally:
        await agent.aclose()
    assert result.status == "completed"
    assert seen[0] == ("start", "r1") and seen[-1] == ("done", "Hello there")
    chunk_types = seen[1:-1]
    assert chunk_types[0] == "start" and chunk_types[-1] == "finish" and "text-delta" in chunk_types


async def test_on_error_gets_the_error_text_of_a_failed_turn() -> None:
    errors: list[Any] = []
    done: list[Any] = []

    async def on_error(error: Any) -> None:
        errors.append(error)

    agent = scripted_agent(Step(error=RuntimeError("upstream fell over")))
    try:
        result = await agent.session("s").chat("hi", on_error=on_error, on_done=done.append)
    finally:
        await agent.aclose()
    assert result.status == "error" and errors == ["upstream fell over"] and done == []


async def test_on_error_receives_what_the_call_would_raise_and_the_call_returns() -> None:
    agent = scripted_agent("never", "never")
    session = agent.session("s")
    broken = RuntimeError("the store is gone")

    async def failing_event(chunk: dict[str, Any]) -> None:
        raise broken

    errors: list[Any] = []
    try:
        result = await session.chat("hi", on_event=failing_event, on_error=errors.append)
        assert result.status == "error" and result.error == "the store is gone"
        assert errors == [broken]
        with pytest.raises(RuntimeError, match="the store is gone"):
            await session.chat("again", on_event=failing_event)  # without on_error it raises, as before
    finally:
        await agent.aclose()


async def test_an_aborted_turn_calls_neither_done_nor_error() -> None:
    calls: list[str] = []
    agent = Think(ScriptedModel(["a slow answer"], delay=30), store=":memory:", load_entrypoints=False)
    session = agent.session("s")

    def on_event(chunk: dict[str, Any]) -> None:
        if chunk["type"] == "start":  # the turn is running: cancel it (as a user's stop button would)
            session.cancel("r1")

    try:
        result = await session.chat("hi", request_id="r1", on_event=on_event, on_done=lambda r: calls.append("done"),
                                    on_error=lambda e: calls.append("error"))
    finally:
        await agent.aclose()
    assert result.status == "aborted" and calls == []


@pytest.mark.parametrize("outcome", ["completed", "error"])
async def test_the_callers_callback_runs_after_the_plugins_response_hook(outcome: str) -> None:
    """think's order (Think calls onDone first, see the ``on_chat_response`` note): the hook,
    then the caller's ``on_done`` / ``on_error``, by which time the hook's work is visible."""
    order: list[str] = []

    class Recorder:
        name = "recorder"

        @hookimpl
        async def on_chat_response(self, result: Any) -> None:
            await asyncio.sleep(0)  # an async hook that yields still finishes first
            order.append(f"on_chat_response {result.status}")

    if outcome == "completed":
        agent = scripted_agent("Hello there", plugins=[Recorder()])
    else:
        agent = scripted_agent(RuntimeError("model down"), plugins=[Recorder()])
    try:
        result = await agent.session("s").chat(
            "hi",
            on_done=lambda r: order.append(f"on_done {r.status}"),
            on_error=lambda e: order.append("on_error"),
        )
    finally:
        await agent.aclose()
    assert result.status == outcome
    caller = "on_done completed" if outcome == "completed" else "on_error"
    assert order == [f"on_chat_response {outcome}", caller]
