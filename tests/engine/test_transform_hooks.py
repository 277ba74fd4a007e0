"""``transform_stream`` and ``transform_tool_result`` against a real provider wire (OpenAI Chat
Completions on a loopback server): what a transform lets out is what observers, the turn's
result, the store and the model's next request see; transforms chain in hook order; a failing
transform fails closed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from tests.loopback import LoopbackServer, Reply
from tests.support.wire import oa_text, oa_tool_call, openai_model
from think_core import (
    ModelEvent,
    TextDelta,
    ToolCallResultContext,
    TurnContext,
    hookimpl,
    tool,
)
from think_core.agent import Think


class Upper:
    """Upper-cases the streamed text."""

    @hookimpl
    def transform_stream(self, ctx: TurnContext) -> Any:
        async def upper(events: AsyncIterator[ModelEvent]) -> AsyncIterator[ModelEvent]:
            async for event in events:
                yield TextDelta(event.text.upper()) if isinstance(event, TextDelta) else event

        return upper


class Exclaim:
    """Appends "!" to every text delta (runs after Upper when registered before it: LIFO)."""

    @hookimpl(trylast=True)
    async def transform_stream(self, ctx: TurnContext) -> Any:
        async def exclaim(events: AsyncIterator[ModelEvent]) -> AsyncIterator[ModelEvent]:
            async for event in events:
                yield TextDelta(event.text + "!") if isinstance(event, TextDelta) else event

        return exclaim


class Seen:
    """Observes what every other hook is shown."""

    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.after: list[ToolCallResultContext] = []

    @hookimpl
    def on_chunk(self, ctx: Any) -> None:
        if ctx.chunk.type == "text-delta":
            self.deltas.append(ctx.chunk.text)

    @hookimpl
    def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        self.after.append(ctx)


def texts_of(request_body: dict[str, Any]) -> str:
    return json.dumps(request_body["messages"])


async def test_chained_stream_transforms_are_what_observers_the_result_and_the_store_see() -> None:
    seen = Seen()
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_text("hel", "lo")), Reply.sse(oa_text("ok")))
        think = Think(openai_model(provider), plugins=[Exclaim(), Upper(), seen], load_entrypoints=False)
        async with think:
            session = think.session("s")
            result = await session.chat("hi")
            assert result.status == "completed", result.error
            # Upper runs first (registered last), then Exclaim (trylast) sees its output.
            assert seen.deltas == ["HEL!", "LO!"]
            assert result.text == "HEL!LO!"
            [_, stored] = await session.messages()
            assert [p["text"] for p in stored.parts if p["type"] == "text"] == ["HEL!LO!"]
            await session.chat("again")
    assert "HEL!LO!" in texts_of(provider.requests[1].json)  # the model's later context
    assert "hello" not in texts_of(provider.requests[1].json)


async def test_no_transform_leaves_the_stream_as_the_model_sent_it() -> None:
    class Nothing:
        @hookimpl
        def transform_stream(self, ctx: TurnContext) -> None:
            return None

    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_text("hel", "lo")))
        async with Think(openai_model(provider), plugins=[Nothing()], load_entrypoints=False) as think:
            result = await think.session("s").chat("hi")
    assert result.text == "hello"


async def test_a_failing_transform_fails_the_turn_naming_the_plugin_and_shows_nothing_it_held() -> None:
    class Broken:
        name = "vetter"

        @hookimpl
        def transform_stream(self, ctx: TurnContext) -> Any:
            async def broken(events: AsyncIterator[ModelEvent]) -> AsyncIterator[ModelEvent]:
                async for event in events:
                    if isinstance(event, TextDelta) and "secret" in event.text:
                        raise ValueError("cannot vet this")
                    yield event

            return broken

    seen = Seen()
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_text("the ", "secret ", "is 42")))
        think = Think(openai_model(provider), plugins=[Broken(), seen], load_entrypoints=False)
        async with think:
            session = think.session("s")
            result = await session.chat("hi")
            assert result.status == "error"
            assert "plugin 'vetter' failed in transform_stream" in str(result.error)
            stored = json.dumps([m.parts for m in await session.messages()])
    assert "secret" not in "".join(seen.deltas) and "secret" not in stored and "42" not in stored


async def test_a_transform_that_returns_no_callable_is_refused_naming_the_plugin() -> None:
    class Wrong:
        @hookimpl
        def transform_stream(self, ctx: TurnContext) -> Any:
            return "not a transform"

    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_text("hello")))
        async with Think(openai_model(provider), plugins=[Wrong()], load_entrypoints=False) as think:
            result = await think.session("s").chat("hi")
    assert result.status == "error"
    assert "returned an invalid result from transform_stream" in str(result.error) and "callable" in str(result.error)
    assert provider.requests == []  # refused before the model was asked


@tool
def lookup_card(customer: str) -> dict[str, Any]:
    """The customer's card on file."""
    return {"customer": customer, "card": "4242 4242 4242 4242", "history": ["paid with 4242 4242 4242 4242"]}


class MaskCards:
    @hookimpl
    def transform_tool_result(self, ctx: ToolCallResultContext) -> Any:
        return json.loads(json.dumps(ctx.output).replace("4242 4242 4242 4242", "**** 4242"))


class Tag:
    """Runs after MaskCards (trylast): sees the masked output and tags it."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    @hookimpl(trylast=True)
    async def transform_tool_result(self, ctx: ToolCallResultContext) -> Any:
        self.inputs.append(ctx.output)
        return {**ctx.output, "checked": True}


async def test_a_masked_tool_result_never_reaches_the_model_the_store_or_after_tool_call() -> None:
    seen, tag = Seen(), Tag()
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_tool_call("call_1", "lookup_card", '{"customer": "ana"}')), Reply.sse(oa_text("Done.")))
        think = Think(openai_model(provider), tools=[lookup_card], plugins=[tag, MaskCards(), seen], load_entrypoints=False)
        async with think:
            session = think.session("s")
            result = await session.chat("card?")
            assert result.status == "completed", result.error
            stored = json.dumps([m.parts for m in await session.messages()])
    assert tag.inputs == [{"customer": "ana", "card": "**** 4242", "history": ["paid with **** 4242"]}]
    [after] = seen.after
    assert after.output == {"customer": "ana", "card": "**** 4242", "history": ["paid with **** 4242"], "checked": True}
    assert "4242 4242" not in texts_of(provider.requests[1].json) and "**** 4242" in texts_of(provider.requests[1].json)
    assert "4242 4242" not in stored and '"checked": true' in stored


async def test_a_failing_result_transform_withholds_the_output_and_the_turn_goes_on() -> None:
    class Broken:
        @hookimpl
        def transform_tool_result(self, ctx: ToolCallResultContext) -> Any:
            raise RuntimeError("mask service down")

    seen = Seen()
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_tool_call("call_1", "lookup_card", '{"customer": "ana"}')), Reply.sse(oa_text("Sorry.")))
        think = Think(openai_model(provider), tools=[lookup_card], plugins=[Broken(), seen], load_entrypoints=False)
        async with think:
            session = think.session("s")
            result = await session.chat("card?")
            stored = json.dumps([m.parts for m in await session.messages()])
    assert result.status == "completed" and result.text == "Sorry."
    [after] = seen.after
    assert not after.success and "withheld" in (after.error or "") and "transform_tool_result" in (after.error or "")
    assert "4242" not in texts_of(provider.requests[1].json) and "4242" not in stored


async def test_preliminary_results_of_a_streaming_tool_are_transformed_too() -> None:
    @tool
    async def progress() -> AsyncIterator[str]:
        """Streams its progress."""
        yield "card 4242 4242 4242 4242 found"
        yield "done with 4242 4242 4242 4242"

    class Mask:
        @hookimpl
        def transform_tool_result(self, ctx: ToolCallResultContext) -> Any:
            return str(ctx.output).replace("4242 4242 4242 4242", "****")

    shown: list[Any] = []

    class Chunks:
        @hookimpl
        def on_chunk(self, ctx: Any) -> None:
            if ctx.chunk.type == "tool-result":
                shown.append(ctx.chunk.output)

    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_tool_call("call_1", "progress", "{}")), Reply.sse(oa_text("ok")))
        think = Think(openai_model(provider), tools=[progress], plugins=[Mask(), Chunks()], load_entrypoints=False)
        async with think:
            stream = think.session("s").stream("go")
            chunks = [chunk async for chunk in stream]
    assert shown == ["card **** found", "done with ****", "done with ****"]
    assert "4242" not in json.dumps(chunks)
