"""What a continuation's result holds (issue 35): the continuation extends the answer it
continues (one message, same id), so its result says what this turn added — ``text`` and
``added_parts`` are this turn's, ``message`` the whole answer — for the caller and for
``on_chat_response``."""

from __future__ import annotations

from typing import Any

from think_core import ScriptedModel, Step, hookimpl
from think_core.agent import Think


class Responses:
    name = "responses"

    def __init__(self) -> None:
        self.seen: list[Any] = []

    @hookimpl
    def on_chat_response(self, result: Any) -> None:
        self.seen.append(result)


async def test_a_continuations_result_holds_what_it_added_beside_the_whole_answer() -> None:
    responses = Responses()
    agent = Think(ScriptedModel([" upon a time."]), store=":memory:", load_entrypoints=False, plugins=[responses])
    session = agent.session("s")
    try:
        await session.add_messages([
            {"role": "user", "parts": [{"type": "text", "text": "tell me a story"}]},
            {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "Once"}]},
        ])
        result = await session.continue_last_turn()
        history = await session.messages()
    finally:
        await agent.aclose()
    assert result.status == "completed" and result.continuation
    assert result.message is not None and result.message.id == "a1"  # one answer, extended
    assert result.message.text == "Once upon a time."
    assert result.text == " upon a time."  # what this turn said
    assert result.continued_parts == 1
    assert [p.get("text") for p in result.added_parts if p["type"] == "text"] == [" upon a time."]
    assert [m.id for m in history][-1] == "a1" and len(history) == 2
    (hooked,) = responses.seen
    assert hooked.message.id == "a1" and hooked.continued_parts == 1
    assert [p.get("text") for p in hooked.added_parts if p["type"] == "text"] == [" upon a time."]


async def test_a_turn_that_continues_nothing_adds_all_of_its_message() -> None:
    agent = Think(ScriptedModel([Step(text="Hello.")]), store=":memory:", load_entrypoints=False)
    try:
        result = await agent.session("s").chat("hi")
    finally:
        await agent.aclose()
    assert result.continued_parts == 0
    assert result.text == result.message.text == "Hello."
    assert result.added_parts == result.message.parts
