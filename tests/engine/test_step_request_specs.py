"""A step's request carries its own tool specs: a model (or ``before_step``) that changes a
spec's schema in place for its own request changes neither the tool nor the next step's spec;
a turn's usage still sums every step's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from think_core import ScriptedModel, Step, Think, Usage, tool
from think_core.events import ModelEvent
from think_core.models.base import ModelRequest
from think_core.models.scripted import call


def weather(city: str) -> str:
    """The weather."""
    return f"Sunny in {city}"


class Rewriting(ScriptedModel):
    """A model that adapts each tool schema in place for its provider, and records what it saw."""

    def __init__(self, steps: list[Step | str]) -> None:
        super().__init__(steps)
        self.seen: list[dict[str, Any]] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        for spec in request.tools:
            self.seen.append(dict(spec.parameters))
            spec.parameters["additionalProperties"] = False
            spec.parameters["properties"] = {}
        async for event in super().stream(request):
            yield event


async def test_a_model_changing_its_request_changes_no_tool() -> None:
    weather_tool = tool(weather)
    schema = dict(weather_tool.parameters)
    model = Rewriting([
        Step(tool_calls=[call("weather", {"city": "Paris"})], usage=Usage(input_tokens=10, output_tokens=2)),
        Step(text="Sunny.", usage=Usage(input_tokens=15, output_tokens=3, reasoning_tokens=1)),
    ])
    agent = Think(model, tools=[weather_tool], load_entrypoints=False)
    try:
        result = await agent.session("s").chat("Weather?")
    finally:
        await agent.aclose()
    assert result.text == "Sunny."
    assert weather_tool.parameters == schema
    assert model.seen == [schema, schema]  # the second step was told the tool's own schema again
    assert "city" in schema["properties"]
    assert result.usage == Usage(input_tokens=25, output_tokens=5, reasoning_tokens=1)
