"""The bundled ``redact`` plugin against the OpenAI wire on a loopback server, the model's text
arriving four characters at a time: a pattern split across chunks never reaches an observer, a
log, a trace, the turn's result, the store or the model's next request; tool results are
masked with ``tool_results``."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.loopback import LoopbackServer, Reply
from tests.support.wire import oa_text, oa_tool_call, openai_model
from think_core import ConfigurationError, hookimpl, tool
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel
from think_plugins.otel import OTelTracing
from think_plugins.redact import Redact, Redactor, RedactSettings

PHONE = r"\d{3}-\d{4}"
ANSWER = "Call 555-0123 now, or 555-0199 later; 12-34 is fine."
REDACTED = "Call [redacted] now, or [redacted] later; 12-34 is fine."


def in_fours(text: str) -> list[str]:
    return [text[i:i + 4] for i in range(0, len(text), 4)]


class Observer:
    def __init__(self) -> None:
        self.deltas: list[str] = []

    @hookimpl
    def on_chunk(self, ctx: Any) -> None:
        if ctx.chunk.type == "text-delta":
            self.deltas.append(ctx.chunk.text)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_a_match_split_anywhere_is_caught(size: int) -> None:
    redactor = Redactor(RedactSettings(patterns=[PHONE]).matcher, "[redacted]")
    pieces = [ANSWER[i:i + size] for i in range(0, len(ANSWER), size)]
    shown = [redactor.feed(piece) for piece in pieces] + [redactor.flush()]
    assert "".join(shown) == REDACTED
    # Nothing held longer than needed: all the text before the first digit streamed as it came.
    assert "".join(shown[: len("Call ") // size]) == "Call "[: (len("Call ") // size) * size]


def test_bad_patterns_stop_start_up_naming_the_plugin() -> None:
    model = ScriptedModel(["unused"])
    with pytest.raises(ConfigurationError, match="'redact'.*does not compile"):
        Think(model, settings={"redact": {"patterns": ["(unclosed"]}}, plugins=[Redact()], load_entrypoints=False)
    with pytest.raises(ConfigurationError, match="'redact'.*empty string"):
        Think(model, settings={"redact": {"patterns": ["x*"]}}, plugins=[Redact()], load_entrypoints=False)


async def test_the_streamed_answer_is_redacted_for_everyone(caplog: pytest.LogCaptureFixture) -> None:
    observer = Observer()
    exporter = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    caplog.set_level(logging.DEBUG)
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_text(*in_fours(ANSWER))), Reply.sse(oa_text("Noted.")))
        think = Think(
            openai_model(provider),
            plugins=[Redact({"patterns": [PHONE]}), observer, OTelTracing({"capture_content": True}, tracer_provider=tracer)],
            load_entrypoints=False,
        )
        async with think:
            session = think.session("s")
            chunks = [chunk async for chunk in session.stream("how do I reach you?")]
            stored = [m.model_dump() for m in await session.messages()]
            first_turn = list(observer.deltas)
            again = await session.chat("thanks")
            assert again.text == "Noted."
    tracer.shutdown()
    streamed = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert streamed == "".join(first_turn) == REDACTED
    assert stored[1]["parts"][-1]["text"] == REDACTED
    assert stored[1]["metadata"]["transformedBy"] == ["redact"]  # clients show who shaped the answer
    next_request = json.dumps(provider.requests[1].json["messages"])
    assert "[redacted]" in next_request
    spans = json.dumps([dict(span.attributes or {}) for span in exporter.get_finished_spans()])
    assert "[redacted]" in spans  # content is traced ...
    for where in (json.dumps(chunks), json.dumps(stored), next_request, spans, caplog.text):
        assert "555-0123" not in where and "555-0199" not in where  # ... but never unredacted


@tool
def customer(name: str) -> dict[str, Any]:
    """A customer's record."""
    return {"name": name, "phone": "555-0123", "notes": ["called from 555-0199"]}


async def test_tool_results_are_masked_before_the_model_and_the_store_see_them() -> None:
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_tool_call("call_1", "customer", '{"name": "ana"}')), Reply.sse(oa_text("Found her.")))
        think = Think(
            openai_model(provider), tools=[customer],
            plugins=[Redact({"patterns": [PHONE], "tool_results": True, "replacement": "<phone>"})],
            load_entrypoints=False,
        )
        async with think:
            session = think.session("s")
            chunks = [chunk async for chunk in session.stream("who is ana?")]
            stored = json.dumps([m.model_dump() for m in await session.messages()])
    [output] = [c["output"] for c in chunks if c["type"] == "tool-output-available"]
    assert output == {"name": "ana", "phone": "<phone>", "notes": ["called from <phone>"]}
    assert '"rewrittenBy": ["redact"]' in stored  # the answer records who rewrote the result
    for where in (json.dumps(chunks), stored, json.dumps(provider.requests[1].json["messages"])):
        assert "555-01" not in where


async def test_without_patterns_it_does_nothing() -> None:
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_text(*in_fours(ANSWER))))
        async with Think(openai_model(provider), plugins=[Redact()], load_entrypoints=False) as think:
            result = await think.session("s").chat("hi")
    assert result.text == ANSWER


async def test_a_tools_file_is_left_whole_while_its_text_is_masked() -> None:
    """base64 can hold anything a pattern matches: a file item's data is not text to rewrite."""
    import base64

    from think_core import File

    data = b"\x89PNG\r\n\x1a\n" + b"555-0123" * 8  # bytes whose base64 a digits pattern would hit
    encoded = base64.b64encode(data).decode()

    @tool
    def snapshot() -> list[Any]:
        """A picture and a caption."""
        return ["called 555-0199", File(data=data, media_type="image/png", filename="555-0123.png")]

    pattern = r"\d{3}-\d{4}|[A-Za-z0-9+/]{8}"  # the second alternative matches inside any base64
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_tool_call("call_1", "snapshot", "{}")), Reply.sse(oa_text("Here.")))
        think = Think(openai_model(provider), tools=[snapshot],
                      plugins=[Redact({"patterns": [pattern], "tool_results": True})], load_entrypoints=False)
        async with think:
            session = think.session("s")
            await session.chat("show me")
            [stored] = [p for m in await session.messages() for p in m.parts if p.get("toolCallId") == "call_1"]
    caption, picture = stored["output"]
    assert caption == {"type": "text", "text": "called [redacted]"}
    assert picture["url"] == f"data:image/png;base64,{encoded}" and picture["mediaType"] == "image/png"
    assert "555-0123" not in picture.get("filename", "")
