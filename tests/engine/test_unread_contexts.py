"""A hook no plugin implements costs its context nothing: the turn builds ``TurnContext``,
``StepContext``, ``ToolCallContext``, ``ToolCallResultContext`` and ``ChatResponseResult`` (each
a validated model holding a copy of the history) and a tool's ``ToolContext`` only for someone
who reads them — and a plugin registered between two turns gets every one of them again."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from think_core import ScriptedModel, Step, Think, ToolContext, hookimpl, tool
from think_core.models.base import ToolMessage
from think_core.models.scripted import call
from think_core.runner import turn_runner
from think_core.turn import loop, tool_calls

BUILT: Counter[str] = Counter()


def counted(module: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    original = getattr(module, name)

    class Counted(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            BUILT[name] += 1
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(module, name, Counted)


@pytest.fixture(autouse=True)
def count_contexts(monkeypatch: pytest.MonkeyPatch) -> None:
    BUILT.clear()
    for module, name in ((loop, "TurnContext"), (loop, "StepContext"), (tool_calls, "ToolCallContext"),
                         (tool_calls, "ToolCallResultContext"), (tool_calls, "ToolContext"),
                         (turn_runner, "ChatResponseResult")):
        counted(module, name, monkeypatch)


def weather(city: str) -> str:
    """The weather."""
    return f"Sunny in {city}"


def billed(city: str, context: ToolContext) -> str:
    """The weather, from a service that bills the call by its key."""
    return f"{city}: {context.idempotency_key[:4]}"


def tool_turn() -> list[Step | str]:
    return [Step(tool_calls=[call("weather", {"city": "Paris"}), call("weather", {"city": "Oslo"})]), "Sunny."]


class Everything:
    """Reads every context the turn has."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    @hookimpl
    def before_turn(self, ctx: Any) -> None:
        self.seen["before_turn"] += len(ctx.messages) > 0

    @hookimpl
    def before_step(self, ctx: Any) -> None:
        self.seen["before_step"] += 1

    @hookimpl
    def before_tool_call(self, ctx: Any) -> None:
        self.seen["before_tool_call"] += ctx.input["city"] in ("Paris", "Oslo")

    @hookimpl
    def after_tool_call(self, ctx: Any) -> None:
        self.seen["after_tool_call"] += ctx.output.startswith("Sunny in")

    @hookimpl
    def on_chat_response(self, result: Any) -> None:
        self.seen["on_chat_response"] += result.message.role == "assistant"


async def test_no_context_is_built_for_a_hook_nobody_implements_until_a_plugin_comes() -> None:
    model = ScriptedModel([*tool_turn(), *tool_turn()])
    async with Think(model, tools=[tool(weather)], store=":memory:", load_entrypoints=False) as agent:
        session = agent.session("s")
        assert (await session.chat("Weather?")).text == "Sunny."
        assert BUILT == Counter()
        assert [m.role for m in model.requests[1].messages] == ["user", "assistant", "tool", "tool"]

        everything = Everything()
        agent.plugin_manager.register(everything, name="everything")
        assert (await session.chat("And now?")).text == "Sunny."
    assert everything.seen == {"before_turn": 1, "before_step": 2, "before_tool_call": 2, "after_tool_call": 2,
                               "on_chat_response": 1}
    assert BUILT == {"TurnContext": 1, "StepContext": 2, "ToolCallContext": 2, "ToolCallResultContext": 2,
                     "ChatResponseResult": 1}


async def test_a_tool_that_takes_its_context_gets_one_per_call() -> None:
    model = ScriptedModel([Step(tool_calls=[call("billed", {"city": "Paris"})]), "Billed."])
    async with Think(model, tools=[tool(billed), tool(weather)], store=":memory:", load_entrypoints=False) as agent:
        assert (await agent.session("s").chat("Bill it")).text == "Billed."
    assert BUILT == {"ToolContext": 1}
    answered = model.requests[1].messages[-1]
    assert isinstance(answered, ToolMessage) and answered.output.startswith("Paris: ")
