"""Hook time limits and sync hooks that block the event loop.

A hung hook never keeps its turn: with ``hook_timeout=1`` each turn ends with its hook's
documented outcome; with ``hook_timeout=None`` ``cancel_all()`` frees it. Every test runs a real
agent on a SQLite file; deadlines are generous, the limits themselves are whole seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from tests.support.scripted import tool_results
from think_core import (
    ConfigurationError,
    HookTimeout,
    PluginError,
    ScriptedModel,
    Step,
    Think,
    hookimpl,
    tool,
)
from think_core.models import call

DEADLINE = 30  # seconds a turn may take on a busy machine; a hung one would take forever
WORDS = " ".join(f"w{i}" for i in range(40))  # 40 streamed pieces


async def hang() -> None:
    await asyncio.Event().wait()


class Calls:
    """What a test plugin saw: how often each hook ran, and an event set on the first call.
    ``stall`` (on by default) makes its hook hang or block; a test turns it off to go on."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.entered = asyncio.Event()
        self.stall = True

    def enter(self, hook: str) -> None:
        self.counts[hook] = self.counts.get(hook, 0) + 1
        self.entered.set()


class HungToolGuard(Calls):
    name = "hung_guard"

    @hookimpl
    async def before_tool_call(self, ctx: Any) -> None:
        self.enter("before_tool_call")
        if self.stall:
            await hang()


class SlowChunks(Calls):
    """A sync on_chunk that blocks the event loop 1.5 s per chunk (a blocking HTTP call, say)."""

    name = "slow_chunks"

    @hookimpl
    def on_chunk(self, ctx: Any) -> None:
        self.enter("on_chunk")
        if self.stall:
            time.sleep(1.5)


class HungResponse(Calls):
    name = "hung_response"

    @hookimpl
    async def on_chat_response(self, result: Any) -> None:
        self.enter("on_chat_response")
        if self.stall:
            await hang()


class HungErrorHandler(Calls):
    name = "hung_error_handler"

    @hookimpl
    async def on_chat_error(self, error: BaseException, ctx: Any) -> None:
        self.enter("on_chat_error")
        if self.stall:
            await hang()


ran: list[str] = []


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    ran.append(path)
    return f"deleted {path}"


def tool_step() -> list[Any]:
    return [Step(tool_calls=[call("delete_file", {"path": "a.txt"})]), "done"]


def agent_on_disk(tmp_path: Path, script: list[Any], plugin: object, **options: Any) -> Think:
    options.setdefault("tools", [delete_file])
    return Think(
        ScriptedModel(script, delay=0.01),
        store=str(tmp_path / "think.db"),
        plugins=[plugin],
        load_entrypoints=False,
        **options,
    )


@pytest.fixture(autouse=True)
def _reset_tool_runs() -> None:
    ran.clear()


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and text in r.getMessage()]


# -- hook_timeout=1: each hung hook ends with its documented outcome ------------------------------


async def test_a_hung_before_tool_call_blocks_the_call_and_the_turn_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    guard = HungToolGuard()
    agent = agent_on_disk(tmp_path, tool_step(), guard, hook_timeout=1)
    result = await asyncio.wait_for(agent.session("s").chat("delete a.txt"), DEADLINE)
    assert result.status == "completed" and result.text == "done"
    assert ran == []  # fail closed: the call never ran
    reason = tool_results(agent.model)["delete_file"].output
    assert reason.startswith('Tool "delete_file" was blocked')
    assert "'hung_guard' timed out in before_tool_call after 1s" in reason
    assert warnings_about(caplog, "'hung_guard' timed out in before_tool_call")
    parts = [p for p in (await agent.session("s").messages())[-1].parts if p.get("toolCallId")]
    assert parts[0]["state"] == "output-available" and parts[0]["output"] == reason
    await agent.aclose()


async def test_a_blocking_on_chunk_is_skipped_for_the_rest_of_its_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    chunks = SlowChunks()
    agent = agent_on_disk(tmp_path, [WORDS, "second answer"], chunks, hook_timeout=1)
    session = agent.session("s")
    # 40 chunks at 1.5 s each would hold the turn for a minute; past its limit it is skipped.
    result = await asyncio.wait_for(session.chat("talk"), DEADLINE)
    assert result.status == "completed" and result.text == WORDS
    assert chunks.counts["on_chunk"] == 1
    assert warnings_about(caplog, "'slow_chunks' timed out in on_chunk after 1s (hook_timeout); skipped for the rest of turn")
    # Skipped for that turn only: the next turn hands it chunks again.
    second = await asyncio.wait_for(session.chat("again"), DEADLINE)
    assert second.text == "second answer" and chunks.counts["on_chunk"] == 2
    await agent.aclose()


async def test_a_hung_on_chat_response_is_skipped_and_the_answer_stands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = agent_on_disk(tmp_path, ["hello there"], HungResponse(), hook_timeout=1)
    result = await asyncio.wait_for(agent.session("s").chat("hi"), DEADLINE)
    assert result.status == "completed" and result.text == "hello there"
    assert warnings_about(caplog, "'hung_response' timed out in on_chat_response after 1s (hook_timeout); skipped")
    assert [m.role for m in await agent.session("s").messages()] == ["user", "assistant"]
    # The session is free: the next turn runs.
    agent.model.add("again")
    assert (await asyncio.wait_for(agent.session("s").chat("more"), DEADLINE)).text == "again"
    await agent.aclose()


async def test_a_hung_on_chat_error_is_skipped_and_the_turn_ends_in_the_original_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = agent_on_disk(tmp_path, [Step(error=RuntimeError("model exploded"))], HungErrorHandler(), hook_timeout=1)
    result = await asyncio.wait_for(agent.session("s").chat("hi"), DEADLINE)
    assert result.status == "error" and result.error == "model exploded"
    assert warnings_about(caplog, "'hung_error_handler' timed out in on_chat_error after 1s (hook_timeout); skipped")
    await agent.aclose()


async def test_a_hung_before_turn_fails_the_turn_closed(tmp_path: Path) -> None:
    class HungBeforeTurn:
        name = "hung_before_turn"

        @hookimpl
        async def before_turn(self, ctx: Any) -> None:
            await hang()

    agent = agent_on_disk(tmp_path, ["never streamed"], HungBeforeTurn(), hook_timeout=1)
    result = await asyncio.wait_for(agent.session("s").chat("hi"), DEADLINE)
    assert result.status == "error"
    assert "'hung_before_turn' timed out in before_turn after 1s" in (result.error or "")
    assert agent.model.requests == []  # the model was never called
    await agent.aclose()


async def test_a_hung_configure_session_fails_opening_the_session(tmp_path: Path) -> None:
    class HungSetup:
        name = "hung_setup"

        @hookimpl
        async def configure_session(self, session: Any) -> None:
            await hang()

    agent = agent_on_disk(tmp_path, ["hi"], HungSetup(), hook_timeout=1)
    with pytest.raises(HookTimeout) as raised:
        await asyncio.wait_for(agent.session("s").open(), DEADLINE)
    # A PluginError, and not a TimeoutError: a caller's own `except TimeoutError` around
    # `asyncio.wait_for` must not mistake the plugin's missed limit for its deadline.
    assert isinstance(raised.value, PluginError) and not isinstance(raised.value, TimeoutError)
    assert (raised.value.plugin_name, raised.value.hook, raised.value.limit) == ("hung_setup", "configure_session", 1.0)
    await agent.aclose()


async def test_a_sync_decision_past_its_limit_is_dropped_and_the_call_blocked(tmp_path: Path) -> None:
    class SlowAllow:
        name = "slow_allow"

        @hookimpl
        def before_tool_call(self, ctx: Any) -> dict[str, str]:
            time.sleep(1.5)  # cannot be interrupted; its late "allow" must not count
            return {"action": "allow"}

    agent = agent_on_disk(tmp_path, tool_step(), SlowAllow(), hook_timeout=1)
    result = await asyncio.wait_for(agent.session("s").chat("delete a.txt"), DEADLINE)
    assert result.status == "completed" and ran == []
    assert "'slow_allow' timed out in before_tool_call" in tool_results(agent.model)["delete_file"].output
    await agent.aclose()


async def test_a_timeout_error_the_hook_raises_itself_is_an_ordinary_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class RaisesTimeout:
        name = "raises_timeout"

        @hookimpl
        async def on_chat_response(self, result: Any) -> None:
            raise TimeoutError("the plugin's own backend timed out")

    agent = agent_on_disk(tmp_path, ["hi"], RaisesTimeout(), hook_timeout=5)
    result = await asyncio.wait_for(agent.session("s").chat("hi"), DEADLINE)
    assert result.status == "completed"
    assert warnings_about(caplog, "plugin 'raises_timeout' failed in on_chat_response")
    assert not warnings_about(caplog, "timed out in")
    await agent.aclose()


# -- hook_timeout=None: cancel_all() frees a turn waiting in any hook ------------------------------


async def cancel_when_entered(session: Any, plugin: Calls) -> None:
    await asyncio.wait_for(plugin.entered.wait(), DEADLINE)
    assert session.cancel_all() == 1


@pytest.mark.parametrize(
    ("plugin_type", "script", "status"),
    [
        (HungToolGuard, tool_step(), "aborted"),
        (SlowChunks, [WORDS], "aborted"),
        (HungErrorHandler, [Step(error=RuntimeError("model exploded"))], "aborted"),
        # The answer was persisted before on_chat_response: it stands.
        (HungResponse, ["hello there"], "completed"),
    ],
)
async def test_without_a_limit_cancel_all_frees_a_turn_waiting_in_a_hook(
    tmp_path: Path, plugin_type: type[Calls], script: list[Any], status: str
) -> None:
    plugin = plugin_type()
    agent = agent_on_disk(tmp_path, script, plugin, hook_timeout=None)
    session = agent.session("s")
    turn = asyncio.create_task(session.chat("go"))
    await cancel_when_entered(session, plugin)
    result = await asyncio.wait_for(turn, DEADLINE)
    assert result.status == status
    assert session.active_request_ids == []
    assert ran == []
    if plugin_type is SlowChunks:
        assert plugin.counts["on_chunk"] < 5  # freed between chunks, not after all 40
    # The session's turn lock is free again.
    plugin.stall = False
    agent.model.add("next answer")
    following = await asyncio.wait_for(session.chat("next"), DEADLINE)
    assert following.status == "completed"
    assert following.text == ("done" if plugin_type is HungToolGuard else "next answer")
    await agent.aclose()


async def test_without_a_limit_a_hook_may_take_its_time(tmp_path: Path) -> None:
    class Patient:
        name = "patient"

        @hookimpl
        async def before_turn(self, ctx: Any) -> None:
            await asyncio.sleep(1.5)

    agent = agent_on_disk(tmp_path, ["hi"], Patient(), hook_timeout=None)
    assert (await asyncio.wait_for(agent.session("s").chat("hi"), DEADLINE)).status == "completed"
    await agent.aclose()


# -- a plugin's own limit -------------------------------------------------------------------------


class GuardSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")  # the engine's key must not trip a strict model
    strict: bool = True


class ConfiguredGuard(HungToolGuard):
    name = "configured_guard"
    settings_model = GuardSettings


async def test_a_plugin_limit_in_its_settings_wins_over_the_agents(tmp_path: Path) -> None:
    guard = ConfiguredGuard()
    agent = agent_on_disk(
        tmp_path, tool_step(), guard, hook_timeout=None,
        settings={"configured_guard": {"hook_timeout": 1, "strict": False}},
    )
    assert guard.settings == GuardSettings(strict=False)
    result = await asyncio.wait_for(agent.session("s").chat("delete a.txt"), DEADLINE)
    assert result.status == "completed" and ran == []
    assert "'configured_guard' timed out in before_tool_call after 1s" in tool_results(agent.model)["delete_file"].output
    await agent.aclose()


async def test_a_plugin_attribute_sets_its_default_limit(tmp_path: Path) -> None:
    class QuickGuard(HungToolGuard):
        name = "quick_guard"
        hook_timeout = 1

    agent = agent_on_disk(tmp_path, tool_step(), QuickGuard(), hook_timeout=None)
    result = await asyncio.wait_for(agent.session("s").chat("delete a.txt"), DEADLINE)
    assert result.status == "completed" and ran == []
    assert "'quick_guard' timed out in before_tool_call after 1s" in tool_results(agent.model)["delete_file"].output
    await agent.aclose()


async def test_a_plugin_may_lift_the_limit_for_itself(tmp_path: Path) -> None:
    class Unlimited(HungToolGuard):
        name = "unlimited"
        hook_timeout = None

    guard = Unlimited()
    agent = agent_on_disk(tmp_path, tool_step(), guard, hook_timeout=1)
    session = agent.session("s")
    turn = asyncio.create_task(session.chat("delete a.txt"))
    await asyncio.wait_for(guard.entered.wait(), DEADLINE)
    await asyncio.sleep(2)  # past the agent's limit, and still waiting
    assert not turn.done()
    session.cancel_all()
    assert (await asyncio.wait_for(turn, DEADLINE)).status == "aborted"
    await agent.aclose()


@pytest.mark.parametrize("value", [0, -1, "5", True, float("nan"), float("inf")])
def test_a_bad_limit_is_refused_when_the_agent_is_built(tmp_path: Path, value: Any) -> None:
    with pytest.raises(ConfigurationError, match="hook_timeout"):
        Think(ScriptedModel(["hi"]), load_entrypoints=False, hook_timeout=value)
    with pytest.raises(ConfigurationError, match="configured_guard"):
        Think(
            ScriptedModel(["hi"]), load_entrypoints=False, plugins=[ConfiguredGuard()],
            settings={"configured_guard": {"hook_timeout": value}},
        )


# -- sync hooks that block the loop ---------------------------------------------------------------


async def test_a_sync_hook_that_blocks_the_loop_is_reported_once_per_plugin_and_hook(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Blocking:
        name = "blocking"

        @hookimpl
        def before_turn(self, ctx: Any) -> None:
            time.sleep(0.3)

        @hookimpl
        def on_step_finish(self, ctx: Any) -> None:
            time.sleep(0.3)

        @hookimpl
        def on_chunk(self, ctx: Any) -> None:
            time.sleep(0.3)

    agent = agent_on_disk(tmp_path, ["one two", "three"], Blocking())
    for text in ("first", "second"):
        assert (await asyncio.wait_for(agent.session("s").chat(text), DEADLINE)).status == "completed"
    reports = warnings_about(caplog, "blocked the event loop")
    assert len(reports) == 3, reports  # once per hook, though each blocked in both turns
    by_hook = {hook: next(r for r in reports if f"in its sync {hook} " in r) for hook in ("before_turn", "on_step_finish", "on_chunk")}
    assert all("'blocking'" in r for r in reports)
    assert "async def" in by_hook["before_turn"] and "asyncio.to_thread" in by_hook["before_turn"]
    assert "on_step_finish" in by_hook["on_chunk"]  # on_chunk must stay sync: buffer, do I/O later
    await agent.aclose()


async def test_quick_sync_and_async_hooks_are_not_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Quick:
        name = "quick"

        @hookimpl
        def before_turn(self, ctx: Any) -> None:
            return None

        @hookimpl
        async def on_step_finish(self, ctx: Any) -> None:
            await asyncio.sleep(0.3)  # awaits: the loop is free meanwhile

    agent = agent_on_disk(tmp_path, ["hi"], Quick())
    assert (await asyncio.wait_for(agent.session("s").chat("hi"), DEADLINE)).status == "completed"
    assert warnings_about(caplog, "blocked the event loop") == []
    await agent.aclose()
