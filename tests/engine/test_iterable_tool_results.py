"""A tool that *returns* an async iterable (not only an async generator function) is consumed
like one: each item is a preliminary result, the last one is the result."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.recorder import Recorder
from think_core import tool
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call


class Progress:
    """An async iterable that is not a generator (e.g. a client library's stream object)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._items()

    async def _items(self) -> AsyncIterator[dict[str, Any]]:
        for i in range(1, self.n + 1):
            yield {"done": i, "of": self.n}


@tool
async def async_returns_iterable(n: int) -> Any:
    """Returns a stream of progress."""
    return Progress(n)


@tool
def sync_returns_generator(n: int) -> Any:
    """Returns an async generator from a plain function."""

    async def steps() -> AsyncIterator[dict[str, Any]]:
        for i in range(1, n + 1):
            yield {"done": i, "of": n}

    return steps()


@pytest.mark.parametrize("the_tool", [async_returns_iterable, sync_returns_generator], ids=lambda t: t.name)
async def test_a_returned_async_iterable_streams_preliminary_results(the_tool: Any) -> None:
    rec = Recorder()
    model = ScriptedModel([Step(tool_calls=[call(the_tool.name, {"n": 3})]), "all done"])
    agent = Think(model, tools=[the_tool], plugins=[rec], load_entrypoints=False)
    try:
        session = agent.session("s")
        chunks = [c async for c in session.stream("go")]
        outputs = [c for c in chunks if c["type"] == "tool-output-available"]
        assert [o.get("preliminary", False) for o in outputs] == [True, True, True, False]
        assert outputs[-1]["output"] == {"done": 3, "of": 3}
        tool_chunks = [c.chunk for c in rec.contexts["on_chunk"] if c.chunk.type == "tool-result"]
        assert [c.preliminary for c in tool_chunks] == [True, True, True, False]
        assert model.requests[1].messages[-1].output == {"done": 3, "of": 3}
        [after] = rec.contexts["after_tool_call"]
        assert after.success and after.output == {"done": 3, "of": 3}
        _, answer = await session.messages()
        [part] = [p for p in answer.parts if p.get("toolCallId")]
        assert part["state"] == "output-available" and part["output"] == {"done": 3, "of": 3}
        assert "preliminary" not in part
    finally:
        await agent.aclose()
