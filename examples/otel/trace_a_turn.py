"""Trace one think turn with OpenTelemetry and print the spans with the console exporter.

Runs offline: a scripted model whose first call fails with a transient error (the step is
retried), then asks for two weather look-ups at once, then answers. The application only
configures the OpenTelemetry SDK; think's ``otel`` plugin (an entry point, installed with
``think-agent[otel]``) picks up the global tracer provider by itself.

    pip install -e '.[otel]' opentelemetry-sdk
    python examples/otel/trace_a_turn.py
"""

from __future__ import annotations

import asyncio

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from think_core import ProviderError, Think, tool
from think_core.models.scripted import ScriptedModel, Step, call


def configure_tracing() -> None:
    """What an application does once at start-up (any exporter works: OTLP, Jaeger, ...)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "think-otel-example"}))
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """The weather in a city."""
    await asyncio.sleep(0.05)
    return {"Lisbon": "sunny, 24C", "Oslo": "cold, 3C"}.get(city, "unknown")


def scripted_model() -> ScriptedModel:
    return ScriptedModel(
        [
            Step(error=ProviderError("Overloaded", status=529, type="overloaded_error")),  # retried
            Step(tool_calls=[call("get_weather", {"city": "Lisbon"}), call("get_weather", {"city": "Oslo"})]),
            "Lisbon is sunny (24C); Oslo is cold (3C).",
        ]
    )


async def main() -> None:
    configure_tracing()
    agent = Think(
        scripted_model(),
        tools=[get_weather],
        retry={"initial_delay": 0.05},
        disable=["analytics"],  # keep the example from writing analytics of its own
        settings={"otel": {"agent_name": "weather-agent", "capture_content": True}},
    )
    if agent.plugin_manager.get_plugin("otel") is None:
        raise SystemExit("the otel plugin is not installed: pip install -e '.[otel]'")
    async with agent:
        result = await agent.session("demo").chat("What's the weather in Lisbon and Oslo?")
    print(result.text)


if __name__ == "__main__":
    asyncio.run(main())
