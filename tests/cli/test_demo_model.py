"""The demo model (``--model demo``) follows what the user typed, streams at a pace a person
can stop, and has a tool that waits for approval — through the real agent built from the
command line's options."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import pytest

import think_core.server
from think_core.cli.common import add_agent_arguments, build_agent, import_tools
from think_core.cli.demo_model import CLIENT_TOOL, CLOCK_TOOL, STREAM_DELAY, cities_in
from think_core.errors import ConfigurationError


def demo_agent(tmp_path):
    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    args = parser.parse_args(["--model", "demo", "--db", str(tmp_path / "demo.db"), "--no-plugins"])
    return build_agent(args)


def static_tool_parts(message):
    return [p for p in message.parts if p["type"].startswith("tool-")]


async def test_the_city_and_the_note_come_from_what_was_typed(tmp_path):
    agent = demo_agent(tmp_path)
    try:
        session = agent.session("s")
        result = await session.chat("What's the weather like in Porto today?")
        [weather] = static_tool_parts(result.message)
        assert weather["input"] == {"city": "Porto"}
        assert weather["output"]["city"] == "Porto"
        assert "Porto: " in result.text

        result = await session.chat("Weather in Oslo and Tokyo, please")
        assert [p["input"]["city"] for p in static_tool_parts(result.message)] == ["oslo", "tokyo"]
        assert "Oslo: -3°C and snowing; Tokyo: 12°C and clear." in result.text

        result = await session.chat("Take a note: call the plumber on Monday.")
        [note] = static_tool_parts(result.message)
        assert note["input"] == {"text": "call the plumber on Monday"}
        assert note["output"] == "saved: call the plumber on Monday"

        result = await session.chat("remember that the code is 4312")
        assert static_tool_parts(result.message)[0]["input"] == {"text": "the code is 4312"}
    finally:
        await agent.aclose()


def test_cities_are_found_by_name_or_after_a_preposition():
    assert cities_in("is it cold in Lisbon?") == ["lisbon"]
    assert cities_in("forecast for New York") == ["New York"]
    assert cities_in("how are you?") == []


async def test_the_email_tool_waits_for_approval_and_respects_a_denial(tmp_path):
    agent = demo_agent(tmp_path)
    try:
        session = agent.session("s")
        result = await session.chat("Email ada@example.com: lunch at one?")
        [mail] = static_tool_parts(result.message)
        assert mail["type"] == "tool-send_email" and mail["state"] == "approval-requested"
        assert mail["input"] == {"to": "ada@example.com", "text": "lunch at one?"}
        approved = await session.approve_tool_call(mail["toolCallId"], True)
        assert approved is not None and "sent to ada@example.com: lunch at one?" in approved.text

        result = await session.chat("send an email to Bob")
        [mail] = static_tool_parts(result.message)
        assert mail["input"]["to"] == "Bob"
        denied = await session.approve_tool_call(mail["toolCallId"], False)
        assert denied is not None and "did not send it" in denied.text
    finally:
        await agent.aclose()


async def test_replies_stream_word_by_word_at_a_visible_pace(tmp_path):
    agent = demo_agent(tmp_path)
    try:
        arrivals: list[float] = []
        async for chunk in agent.session("s").stream("hello there"):
            if chunk["type"] == "text-delta":
                arrivals.append(time.monotonic())
        # Dozens of words, each after a pause: long enough to press Stop half-way.
        assert len(arrivals) >= 40
        assert arrivals[-1] - arrivals[0] >= (len(arrivals) - 1) * STREAM_DELAY * 0.9
        assert STREAM_DELAY >= 0.03
    finally:
        await agent.aclose()


def tools_agent(tmp_path, *specs):
    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    args = ["--model", "demo", "--db", str(tmp_path / "demo.db"), "--no-plugins"]
    for spec in specs:
        args += ["--tools", spec]
    return build_agent(parser.parse_args(args))


async def test_where_am_i_calls_the_client_tool_the_front_end_offers(tmp_path):
    agent = demo_agent(tmp_path)
    try:
        session = agent.session("s")
        get_location = {"name": "get_location", "description": "Where the user is", "parameters": {"type": "object", "properties": {}}}
        asked = await session.chat("where am I?", body={"clientTools": [get_location]})
        [part] = static_tool_parts(asked.message)
        assert (part["type"], part["state"]) == ("tool-get_location", "input-available")  # waits for the page
        await session.add_tool_result(part["toolCallId"], output={"city": "Porto"})
        history = await session.messages()
        assert "city: Porto" in history[-1].parts[-1]["text"]
        without = await agent.session("t").chat("where am I?")
        assert static_tool_parts(without.message) == [] and "offers no get_location tool" in without.text
    finally:
        await agent.aclose()


async def test_the_page_tools_are_the_demo_tools_and_call_ids_never_repeat(tmp_path):
    # The built-in page offers exactly the client tools the demo calls.
    page = (Path(think_core.server.__file__).parent / "static" / "chat.js").read_text(encoding="utf-8")
    offered = set(re.findall(r"^    (\w+): \{$", page.split("const CLIENT_TOOLS = {", 1)[1].split("\n  };", 1)[0], re.M))
    assert offered == {CLIENT_TOOL, CLOCK_TOOL}
    agent = demo_agent(tmp_path)
    try:
        clock = {"name": CLOCK_TOOL, "parameters": {"type": "object", "properties": {}}}
        asked = await agent.session("s").chat("what time is it?", body={"clientTools": [clock]})
        [part] = static_tool_parts(asked.message)
        assert (part["type"], part["state"]) == (f"tool-{CLOCK_TOOL}", "input-available")
        # Call ids are unique, not numbered per model (two demo servers share a database).
        second = await agent.session("s2").chat("what time is it?", body={"clientTools": [clock]})
        [again] = static_tool_parts(second.message)
        assert re.fullmatch(r"call_[0-9a-f]{16}", part["toolCallId"]) and again["toolCallId"] != part["toolCallId"]
    finally:
        await agent.aclose()


async def test_tools_adds_tools_from_modules_and_says_what_is_wrong(tmp_path):
    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    args = parser.parse_args(["--model", "echo-less", "--tools", "think_core.cli.demo_model:get_weather",
                              "--tools", "think_core.cli.demo_model:TOOLS"])
    assert [t.name for t in import_tools(args.tools)] == ["get_weather", "get_weather", "save_note", "send_email"]
    agent = tools_agent(tmp_path, "think_core.cli.demo_model:save_note")
    try:
        assert "save_note" in agent.tools
    finally:
        await agent.aclose()
    for spec, said in [
        ("no_colon", "expected MODULE:ATTR"),
        ("no_such_module_xyz:tool", "No module named"),
        ("think_core.cli.demo_model:nothing", "has no attribute"),
        ("think_core.cli.demo_model:STREAM_DELAY", "is not a tool"),
    ]:
        with pytest.raises(ConfigurationError, match=said):
            import_tools([spec])
