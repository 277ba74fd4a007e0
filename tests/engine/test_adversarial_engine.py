"""Adversarial tests of the turn engine: hostile tool outputs and inputs, odd tool names,
plugins that crash everywhere at once, cancellation while hooks and tools are suspended, and a
process killed mid-turn.

The standard: bad input gets a clear error and loses nothing; no coroutine is left un-awaited
and cancellation propagates. Tests marked ``xfail(strict=True, reason="BUG: ...")`` document a
real violation of that standard (they start passing, and so fail loudly, once it is fixed).
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from contextlib import aclosing
from typing import Any

import pytest

from tests.recorder import Recorder
from tests.support.agents import make_agent, other_tasks
from think_core import Tool, hookimpl, tool
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.store import SQLiteStore


def agent_and_model(steps: list[Any], *plugins: Any, tools: Any = (), **kwargs: Any) -> tuple[Think, ScriptedModel]:
    model = kwargs.pop("model", None) or ScriptedModel(steps)
    return make_agent(model, tools=tools, plugins=plugins, **kwargs), model


def tool_parts(message: Any) -> list[dict[str, Any]]:
    return [p for p in message.parts if p["type"].startswith("tool-") or p["type"] == "dynamic-tool"]


def strict_json(value: Any) -> str:
    """JSON as a browser's ``JSON.parse`` accepts it (no NaN / Infinity)."""
    return json.dumps(value, allow_nan=False)


async def wait_until(predicate: Any, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


# -- tool outputs that JSON cannot represent ------------------------------------------------------


class Opaque:
    """A plain object: no JSON form, an ordinary repr."""

    def __repr__(self) -> str:
        return "<Opaque thing>"


def _cyclic() -> dict[str, Any]:
    d: dict[str, Any] = {"name": "loop"}
    d["self"] = d
    return d


@pytest.mark.parametrize(
    "make_output",
    [
        lambda: {"tags": {"b", "a"}},
        lambda: {"when": datetime.datetime(2024, 5, 17, 12, 30, tzinfo=datetime.UTC)},
        lambda: {"price": decimal.Decimal("19.99")},
        lambda: {"raw": b"bytes \xe2\x9c\x93"},
        lambda: {"id": uuid.UUID("12345678-1234-5678-1234-567812345678")},
        lambda: Opaque(),
        lambda: {"nested": [Opaque(), (1, 2)]},
        _cyclic,
        lambda: frozenset({1}),
    ],
    ids=["set", "datetime", "decimal", "bytes", "uuid", "opaque", "nested-opaque", "cyclic", "frozenset"],
)
async def test_non_json_tool_outputs_are_converted_persisted_and_sent(make_output: Any, tmp_path: Any) -> None:
    @tool
    def produce() -> Any:
        """Return something JSON cannot represent."""
        return make_output()

    rec = Recorder()
    db = str(tmp_path / "t.db")
    agent, model = agent_and_model([Step(tool_calls=[call("produce")]), "done"], rec, tools=[produce], store=db)
    result = await agent.session("s").chat("go")
    assert result.status == "completed" and result.text == "done"

    part = tool_parts(result.message)[0]
    assert part["state"] == "output-available"
    strict_json(part["output"])  # the persisted output is plain JSON
    assert rec.contexts["after_tool_call"][0].success is True
    strict_json(rec.contexts["after_tool_call"][0].output)
    sent = model.requests[1].messages[-1]
    assert sent.role == "tool" and not sent.is_error and sent.output == part["output"]
    agent.close()

    # A fresh process (a new agent over the same file) reads back exactly what was sent.
    reopened = Think(ScriptedModel([]), store=db, load_entrypoints=False)
    stored = (await reopened.session("s").messages())[-1]
    assert tool_parts(stored)[0]["output"] == part["output"]
    reopened.close()


class ExplodingRepr:
    """Like a detached ORM row: its ``__repr__`` raises."""

    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


class ExplodingStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str exploded")


@tool
def returns_exploding_repr() -> Any:
    """Return an object whose repr raises."""
    return ExplodingRepr()


@tool
def raises_exploding_str() -> str:
    """Raise an exception whose str raises."""
    raise ExplodingStr()


@pytest.mark.parametrize("name", ["returns_exploding_repr", "raises_exploding_str"])
async def test_tool_output_that_cannot_even_be_repred_is_an_error_result_not_a_crash(name: str) -> None:
    rec = Recorder()
    agent, model = agent_and_model(
        [Step(text="Calling.", tool_calls=[call(name)]), "recovered"],
        rec,
        tools=[returns_exploding_repr, raises_exploding_str],
    )
    session = agent.session("s")
    result = await session.chat("go")
    assert result.status == "completed"
    stored = await session.messages()
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[-1].text.startswith("Calling.")
    assert [r.status for r in rec.contexts["on_chat_response"]] == ["completed"]


async def test_huge_tool_output_is_persisted_and_sent_intact() -> None:
    big = "0123456789abcdef" * (3 * 1024 * 1024 // 16)  # 3 MiB

    @tool
    def dump() -> str:
        """A very large result."""
        return big

    agent, model = agent_and_model([Step(tool_calls=[call("dump")]), "read it"], tools=[dump])
    session = agent.session("s")
    result = await session.chat("go")
    assert result.status == "completed"
    assert model.requests[1].messages[-1].output == big
    assert tool_parts((await session.messages())[-1])[0]["output"] == big


@tool
def sync_fails(path: str) -> str:
    """Fail synchronously."""
    raise PermissionError(f"cannot read {path}")


@tool
async def async_fails(path: str) -> str:
    """Fail after an await."""
    await asyncio.sleep(0)
    raise PermissionError(f"cannot read {path}")


@tool
async def generator_fails(path: str):
    """Report progress, then fail."""
    yield {"progress": 0.5}
    raise PermissionError(f"cannot read {path}")


@pytest.mark.parametrize("name", ["sync_fails", "async_fails", "generator_fails"])
async def test_a_raising_tool_is_an_error_result_and_the_turn_goes_on(name: str) -> None:
    rec = Recorder()
    agent, model = agent_and_model(
        [Step(text="Reading.", tool_calls=[call(name, {"path": "/etc/shadow"})]), "It failed, sorry."],
        rec, tools=[sync_fails, async_fails, generator_fails],
    )
    session = agent.session("s")
    result = await session.chat("read it")
    assert result.status == "completed" and result.text == "Reading.It failed, sorry."
    sent = model.requests[1].messages[-1]
    assert sent.is_error and sent.output == "PermissionError: cannot read /etc/shadow"
    assert rec.contexts["after_tool_call"][0].success is False
    part = tool_parts((await session.messages())[-1])[0]
    assert part["state"] == "output-error" and part["errorText"] == "PermissionError: cannot read /etc/shadow"


async def test_a_generator_tool_failing_after_a_yield_is_persisted_as_a_final_error() -> None:
    agent, model = agent_and_model([Step(tool_calls=[call("generator_fails", {"path": "x"})]), "ok"], tools=[generator_fails])
    session = agent.session("s")
    await session.chat("go")
    part = tool_parts((await session.messages())[-1])[0]
    assert part["state"] == "output-error"
    assert not part.get("preliminary")  # a final error is not a preliminary result


# -- tool inputs the model gets wrong -----------------------------------------------------------------


@tool
def book(city: str, nights: int, guests: int = 1) -> str:
    """Book a hotel."""
    raise AssertionError("must not run with invalid input")


@pytest.mark.parametrize(
    ("raw", "mentions"),
    [
        ({"city": "Rome", "nights": 2, "breakfast": True}, "breakfast"),  # an extra field
        ({"city": "Rome"}, "nights"),  # a missing field
        ({"city": ["Rome"], "nights": 2}, "city"),  # the wrong type
        ({"city": "Rome", "nights": "two"}, "nights"),
        ({"city": None, "nights": 2}, "city"),
        ("null", "JSON object"),
        ("[1, 2]", "JSON object"),
        ('"Rome"', "JSON object"),
        ('{"city": "Rome", "nights": 2', "JSON object"),  # truncated arguments
    ],
    ids=["extra", "missing", "list-for-str", "str-for-int", "null-field", "null", "array", "string", "truncated"],
)
async def test_invalid_tool_input_is_an_error_result_naming_the_problem(raw: Any, mentions: str) -> None:
    rec = Recorder()
    agent, model = agent_and_model([Step(tool_calls=[call("book", raw)]), "I will ask again."], rec, tools=[book])
    session = agent.session("s")
    result = await session.chat("book Rome")
    assert result.status == "completed" and result.text == "I will ask again."
    sent = model.requests[1].messages[-1]
    assert sent.role == "tool" and sent.is_error
    assert "book" in sent.output and mentions in sent.output
    after = rec.contexts["after_tool_call"][0]
    assert after.success is False and mentions in after.error
    # Nothing is lost: the call, its raw input and the error are persisted.
    part = tool_parts((await session.messages())[-1])[0]
    assert part["state"] == "output-error" and mentions in part["errorText"]
    assert part["input"] is not None


@pytest.mark.parametrize(
    "name",
    ["", " ", "../../etc/passwd", "a" * 5000, "名前", "tool-book", "book\n", "book ", "BOOK", 'x"; DROP TABLE messages;--'],
    ids=["empty", "space", "path", "long", "cjk", "prefixed", "newline", "trailing-space", "case", "sql"],
)
async def test_unknown_tool_names_with_odd_characters_are_error_results(name: str, tmp_path: Any) -> None:
    db = str(tmp_path / "odd.db")
    agent, model = agent_and_model([Step(tool_calls=[call(name, {})]), "ok"], tools=[book], store=db)
    session = agent.session("s")
    result = await session.chat("go")
    assert result.status == "completed"
    sent = model.requests[1].messages[-1]
    assert sent.is_error and "Unknown tool" in sent.output and "book" in sent.output  # lists the real tools
    agent.close()
    again = Think(ScriptedModel(["next"]), store=db, load_entrypoints=False)
    history = await again.session("s").messages()
    assert [m.role for m in history] == ["user", "assistant"]
    assert tool_parts(history[-1])[0]["state"] == "output-error"
    # The history (with the odd name in it) still converts and runs.
    assert (await again.session("s").chat("and now?")).status == "completed"
    again.close()


async def test_a_tool_whose_name_has_dashes_and_dots_round_trips_through_history() -> None:
    @tool(name="get-weather.v2")
    def weather(city: str) -> dict:
        """The weather."""
        return {"city": city, "sky": "clear"}

    agent, model = agent_and_model(
        [Step(tool_calls=[call("get-weather.v2", {"city": "Oslo"}, id="c1")]), "Clear.", "Still clear."], tools=[weather]
    )
    session = agent.session("s")
    assert (await session.chat("weather?")).status == "completed"
    assert (await session.chat("and now?")).status == "completed"
    assistant = model.requests[2].messages[1]
    assert assistant.role == "assistant" and [c.name for c in assistant.tool_calls] == ["get-weather.v2"]
    result = model.requests[2].messages[2]
    assert result.role == "tool" and result.tool_name == "get-weather.v2" and result.output == {"city": "Oslo", "sky": "clear"}


# -- the model reusing a tool call id ------------------------------------------------------------------


@tool
def echo(n: int) -> int:
    """Echo a number."""
    return n


async def test_a_tool_call_id_reused_across_steps_loses_nothing() -> None:
    # Several OpenAI-compatible servers number calls per response ("call_0"), so the id repeats.
    agent, model = agent_and_model(
        [
            Step(tool_calls=[call("echo", {"n": 1}, id="call_0")]),
            Step(tool_calls=[call("echo", {"n": 2}, id="call_0")]),
            "Both done.",
        ],
        tools=[echo],
    )
    session = agent.session("s")
    result = await session.chat("echo twice")
    assert result.status == "completed"
    parts = tool_parts((await session.messages())[-1])
    assert [(p["input"], p.get("output")) for p in parts] == [({"n": 1}, 1), ({"n": 2}, 2)]


async def test_the_same_tool_call_id_twice_in_one_step_loses_nothing() -> None:
    agent, model = agent_and_model(
        [Step(tool_calls=[call("echo", {"n": 1}, id="dup"), call("echo", {"n": 2}, id="dup")]), "ok"],
        tools=[echo],
    )
    session = agent.session("s")
    result = await session.chat("go")
    assert result.status == "completed"
    parts = tool_parts((await session.messages())[-1])
    assert sorted((p["input"]["n"], p.get("output")) for p in parts) == [(1, 1), (2, 2)]


# -- plugins that crash everywhere at once -------------------------------------------------------------


class CrashEverywhere:
    """Raises in every hook it implements (sync and async mixed)."""

    name = "crasher"

    def __init__(self, *, in_before_step_at: int | None = None) -> None:
        self.in_before_step_at = in_before_step_at

    @hookimpl
    def on_chunk(self, ctx):
        raise RuntimeError("on_chunk boom")

    @hookimpl
    async def before_step(self, ctx):
        if ctx.step_number == self.in_before_step_at:
            raise RuntimeError("before_step boom")
        return None

    @hookimpl
    async def before_tool_call(self, ctx):
        raise RuntimeError("before_tool_call boom")

    @hookimpl
    async def after_tool_call(self, ctx):
        await asyncio.sleep(0)
        raise RuntimeError("after_tool_call boom")

    @hookimpl
    def on_step_finish(self, ctx):
        raise RuntimeError("on_step_finish boom")

    @hookimpl
    async def on_chat_response(self, result):
        raise RuntimeError("on_chat_response boom")

    @hookimpl
    def classify_chat_error(self, error, ctx):
        raise RuntimeError("classify boom")

    @hookimpl
    async def on_chat_error(self, error, ctx):
        raise RuntimeError("on_chat_error boom")


def crash_logs(caplog: Any) -> set[str]:
    """Hooks for which a failure of the plugin ``crasher`` was logged with its name."""
    hooks = set()
    for record in caplog.records:
        text = record.getMessage()
        if "crasher" in text:
            for hook in ("on_chunk", "after_tool_call", "on_step_finish", "on_chat_response", "classify_chat_error", "on_chat_error"):
                if hook in text:
                    hooks.add(hook)
    return hooks


async def test_a_plugin_raising_in_every_observer_and_tool_hook_at_once_does_not_break_the_turn(caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    ran: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        ran.append(a + b)
        return a + b

    rec = Recorder()
    # Registered last → runs first: the crasher's failures come before the recorder sees anything.
    agent, model = agent_and_model(
        [Step(text="Let me add.", tool_calls=[call("add", {"a": 1, "b": 2})]), "Done."], rec, CrashEverywhere(), tools=[add]
    )
    session = agent.session("s")
    result = await session.chat("1+2")
    assert result.status == "completed" and result.text == "Let me add.Done."
    # before_tool_call raised: that call failed (the tool never ran) and the model was told.
    assert ran == []
    sent = model.requests[1].messages[-1]
    assert sent.is_error and "before_tool_call boom" in sent.output
    assert rec.contexts["after_tool_call"][0].success is False
    # Every observer failure was logged with the plugin's name; the recorder still saw everything.
    assert {"on_chunk", "after_tool_call", "on_step_finish", "on_chat_response"} <= crash_logs(caplog)
    assert [r.status for r in rec.contexts["on_chat_response"]] == ["completed"]
    assert len(rec.contexts["on_step_finish"]) == 2
    stored = await session.messages()
    assert [m.role for m in stored] == ["user", "assistant"] and stored[-1].text == "Let me add.Done."
    assert tool_parts(stored[-1])[0]["state"] == "output-error"


async def test_a_fail_closed_hook_crashing_mid_turn_keeps_the_partial_and_the_original_error(caplog: Any) -> None:
    caplog.set_level(logging.INFO)

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    class Allow:
        @hookimpl(trylast=True)
        def before_tool_call(self, ctx):
            return None

    rec = Recorder()
    crasher = CrashEverywhere(in_before_step_at=1)
    agent, model = agent_and_model(
        [Step(text="Step zero.", tool_calls=[call("add", {"a": 2, "b": 2})]), "never streamed"],
        rec, crasher, tools=[add],
    )
    session = agent.session("s")
    result = await session.chat("2+2")
    assert result.status == "error"
    assert "before_step boom" in (result.error or "")  # the crashing on_chat_error did not replace it
    assert len(model.requests) == 1  # step 1 never reached the model
    # Nothing is lost: the user message and step 0 (its text and failed tool call) are persisted.
    stored = await session.messages()
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[-1].text == "Step zero." and len(tool_parts(stored[-1])) == 1
    # classify_chat_error / on_chat_error / on_chat_response failures are logged, named, isolated.
    assert {"classify_chat_error", "on_chat_error", "on_chat_response"} <= crash_logs(caplog)
    assert [r.status for r in rec.contexts["on_chat_response"]] == ["error"]
    assert rec.contexts["on_chat_error"][0].stage == "turn"
    # The session still works afterwards.
    crasher.in_before_step_at = None
    model.add("Recovered.")
    assert (await session.chat("again")).status == "completed"


@pytest.mark.parametrize("hook", ["before_turn", "before_tool_call"])
async def test_a_crashing_decision_hook_is_reported_with_the_plugins_name(hook: str, caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)

    class Quiet:
        name = "quiet_helper"

    class Culprit:
        name = "the_culprit"

    def boom(self: Any, ctx: Any) -> None:
        raise RuntimeError("kaput")

    setattr(Culprit, hook, hookimpl(boom))

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    agent, model = agent_and_model([Step(tool_calls=[call("add", {"a": 1, "b": 1})]), "ok"], Culprit(), Quiet(), tools=[add])
    result = await agent.session("s").chat("go")
    reported = (result.error or "") + "".join(p.get("errorText", "") for p in tool_parts(result.message)) + caplog.text
    assert "kaput" in reported
    assert "the_culprit" in reported


# -- cancellation while hooks, tools and generators are suspended -------------------------------------


class SlowHook:
    """An async hook that would sleep far longer than the test runs."""

    name = "slow"

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.entered = asyncio.Event()
        self.cancelled = False

    async def _sleep(self) -> None:
        self.entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled = True
            raise

    @hookimpl
    async def before_turn(self, ctx):
        if self.hook == "before_turn":
            await self._sleep()

    @hookimpl
    async def before_tool_call(self, ctx):
        if self.hook == "before_tool_call":
            await self._sleep()

    @hookimpl
    async def after_tool_call(self, ctx):
        if self.hook == "after_tool_call":
            await self._sleep()


@pytest.mark.parametrize("hook", ["before_turn", "before_tool_call", "after_tool_call"])
async def test_session_cancel_interrupts_a_slow_async_hook_and_keeps_what_was_done(hook: str) -> None:
    ran: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        ran.append(a + b)
        return a + b

    rec = Recorder()
    slow = SlowHook(hook)
    agent, model = agent_and_model(
        [Step(text="Adding.", tool_calls=[call("add", {"a": 1, "b": 2}), call("add", {"a": 3, "b": 4})]), "never"],
        rec, slow, tools=[add],
    )
    session = agent.session("s")
    task = asyncio.create_task(session.chat("go", request_id="r1"))
    await asyncio.wait_for(slow.entered.wait(), 3)
    started = time.monotonic()
    assert session.cancel("r1") is True
    result = await asyncio.wait_for(task, 3)
    assert time.monotonic() - started < 1.0
    assert result.status == "aborted"
    assert slow.cancelled  # the cancellation reached the hook's await
    assert session.active_request_ids == []
    assert [r.status for r in rec.contexts["on_chat_response"]] == ["aborted"]
    stored = await session.messages()
    assert stored[0].role == "user" and stored[0].text == "go"
    if hook == "before_turn":
        assert len(model.requests) == 0 and len(stored) == 1
    else:
        assert stored[-1].role == "assistant" and stored[-1].text == "Adding."
    if hook == "before_tool_call":
        assert ran == []
    if hook == "after_tool_call":
        # The tool finished before the slow observer: its result is part of the partial message.
        assert ran
        outputs = [p["output"] for p in tool_parts(stored[-1]) if p["state"] == "output-available"]
        assert outputs and set(outputs) <= {3, 7}
    # The lock was released: the session takes another turn.
    slow.hook = "none"
    model.add("Next.")
    assert (await asyncio.wait_for(session.chat("again"), 3)).status == "completed"
    assert other_tasks() == []


async def test_cancelling_a_generator_tool_closes_the_generator_and_keeps_its_preliminary_output() -> None:
    closed = asyncio.Event()
    progress = asyncio.Event()

    @tool
    async def crawl(pages: int):
        """Crawl pages, reporting progress."""
        try:
            for i in range(pages):
                yield {"done": i}
                progress.set()
                await asyncio.sleep(0.05)
            yield {"done": pages, "final": True}
        finally:
            closed.set()

    agent, model = agent_and_model([Step(tool_calls=[call("crawl", {"pages": 1000})]), "never"], tools=[crawl])
    session = agent.session("s")
    task = asyncio.create_task(session.chat("crawl", request_id="r1"))
    await asyncio.wait_for(progress.wait(), 3)
    await asyncio.sleep(0.12)
    session.cancel("r1")
    result = await asyncio.wait_for(task, 3)
    assert result.status == "aborted"
    assert closed.is_set()  # the generator's finally ran before the turn returned
    part = tool_parts((await session.messages())[-1])[0]
    assert part.get("output", {}).get("done", -1) >= 1 and part.get("preliminary") is True
    assert other_tasks() == []


async def _stop_after_five_deltas(session: Any) -> None:
    seen = 0
    async with aclosing(session.stream("talk")) as chunks:
        async for chunk in chunks:
            if chunk["type"] == "text-delta":
                seen += 1
                if seen == 5:
                    break


def _long_agent() -> tuple[Think, ScriptedModel]:
    model = ScriptedModel([Step(text=" ".join(f"w{i}" for i in range(500))), "second"], delay=0.005)
    return Think(model, load_entrypoints=False), model


async def test_a_stream_consumer_that_stops_early_aborts_the_turn_and_frees_the_session() -> None:
    agent, model = _long_agent()
    session = agent.session("s")
    await _stop_after_five_deltas(session)
    await wait_until(lambda: session.active_request_ids == [])
    stored = await session.messages()
    assert [m.role for m in stored] == ["user", "assistant"]
    partial = stored[-1].text
    assert partial.startswith("w0 w1 w2 w3 w4") and len(partial) < 500 * 3
    assert (await asyncio.wait_for(session.chat("more"), 3)).status == "completed"
    assert other_tasks() == []


async def test_closing_the_stream_has_aborted_and_persisted_the_turn_when_aclose_returns() -> None:
    agent, model = _long_agent()
    session = agent.session("s")
    await _stop_after_five_deltas(session)
    assert session.active_request_ids == []
    assert [m.role for m in await session.messages()] == ["user", "assistant"]


async def test_outside_cancellation_during_a_slow_tool_propagates_and_keeps_the_partial() -> None:
    entered = asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Hang."""
        entered.set()
        await asyncio.sleep(30)
        return "never"

    agent, model = agent_and_model([Step(text="Waiting.", tool_calls=[call("wait_forever")])], tools=[wait_forever])
    session = agent.session("s")
    task = asyncio.create_task(session.chat("go"))
    await asyncio.wait_for(entered.wait(), 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert session.active_request_ids == []
    stored = await session.messages()
    assert [m.role for m in stored] == ["user", "assistant"] and stored[-1].text == "Waiting."
    assert other_tasks() == []


# -- client tool results and approvals sent for the wrong call ----------------------------------------


async def test_tool_results_for_unknown_or_settled_calls_are_refused_or_ignored() -> None:
    agent, model = agent_and_model(
        [Step(tool_calls=[call("pick", {}, id="c1")]), "Thanks."], tools=[Tool.client("pick", "Pick a number.")]
    )
    session = agent.session("s")
    first = await session.chat("pick one")
    assert first.status == "completed" and tool_parts(first.message)[0]["state"] == "input-available"
    with pytest.raises(KeyError, match="nope"):
        await session.add_tool_result("nope", 1)
    with pytest.raises(KeyError):
        await agent.session("other").add_tool_result("c1", 1)  # a call of another session
    assert tool_parts((await session.messages())[-1])[0]["state"] == "input-available"
    done = await session.add_tool_result("c1", {"n": 7})
    assert done is not None and done.status == "completed" and done.text == "Thanks."
    assert await session.add_tool_result("c1", {"n": 8}) is None  # a repeated result is ignored
    assert tool_parts((await session.messages())[1])[0]["output"] == {"n": 7}
    assert model.requests[1].messages[-1].output == {"n": 7}


async def test_an_approval_for_a_call_that_awaits_no_approval_loses_nothing() -> None:
    agent, model = agent_and_model(
        [Step(tool_calls=[call("pick", {}, id="c1")]), "Thanks.", "Thanks again."], tools=[Tool.client("pick")]
    )
    session = agent.session("s")
    await session.chat("pick one")
    try:
        await session.approve_tool_call("c1", True)  # bad input: c1 is a client tool, not an approval
    except (ValueError, KeyError):
        pass  # refusing it is fine
    await session.add_tool_result("c1", {"n": 7})
    part = tool_parts((await session.messages())[1])[0]
    assert part["state"] == "output-available" and part["output"] == {"n": 7}


async def test_a_malformed_message_never_poisons_the_session() -> None:
    agent, model = agent_and_model(["one", "two"], model=ScriptedModel(["one", "two"]))
    session = agent.session("s")
    bad = {"id": "a1", "role": "assistant", "parts": [{"type": "tool-x", "state": "output-available", "output": 1}]}
    try:
        await session.chat([bad, "hello"])
    except (ValueError, TypeError):
        pass  # rejecting the bad input up front is fine
    result = await session.chat("are you still there?")
    assert result.status == "completed"
    for message in await session.messages():
        assert all(isinstance(p.get("toolCallId"), str) for p in tool_parts(message))


# -- a process killed mid-turn --------------------------------------------------------------------------


KILLED_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from think_core import hookimpl, tool
    from think_core.agent import Think
    from think_core.models.scripted import ScriptedModel, Step, call

    @tool
    def lookup(q: str) -> str:
        "Look something up."
        return "found " + q

    class Announce:
        @hookimpl
        def on_step_finish(self, ctx):
            if ctx.step_number == 0:
                print("step0", flush=True)

    async def main():
        model = ScriptedModel(
            [Step(text="Looking.", tool_calls=[call("lookup", {"q": "x"})]), Step(text=" ".join(["slow"] * 2000))],
            delay=0.02,
        )
        agent = Think(model, tools=[lookup], plugins=[Announce()], store=sys.argv[1], load_entrypoints=False)
        await agent.session("k").add_messages("earlier note")
        await agent.session("k").chat("please look it up")

    asyncio.run(main())
    """
)


async def test_a_process_killed_mid_turn_loses_no_acknowledged_message(tmp_path: Any) -> None:
    db = str(tmp_path / "killed.db")
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD, db],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "THINK_PLUGINS": ""},
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 15)
        assert line.strip() == "step0"
        await asyncio.sleep(0.1)  # well inside step 1's stream
        child.send_signal(signal.SIGKILL)
        await asyncio.to_thread(child.wait, 5)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)
        child.stdout.close()

    probe = SQLiteStore(db)  # the file opens cleanly after the kill (WAL recovered)
    history = probe.list_messages("k")
    probe.close()
    assert [(m.role, m.text) for m in history][:2] == [("user", "earlier note"), ("user", "please look it up")]
    assert all(m.role in ("user", "assistant") for m in history)

    agent = Think(ScriptedModel(["I am back."]), store=db, load_entrypoints=False)
    session = agent.session("k")
    result = await session.chat("still there?")
    assert result.status == "completed" and result.text == "I am back."
    texts = [m.text for m in await session.messages()]
    assert texts[:2] == ["earlier note", "please look it up"] and texts[-2:] == ["still there?", "I am back."]
    agent.close()
