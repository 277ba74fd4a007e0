"""What a chat client's transcript does to the stored history: its placeholder for an answer
that never came is not stored, and a whole transcript it sets (``setMessages``) replaces the
stored one from the first difference, under the turn lock."""

from __future__ import annotations

import asyncio

import pytest

from think_core import Think
from think_core.chat.transcript import reconcile, replacement
from think_core.models.scripted import ScriptedModel, Step
from think_core.types import UIMessage


def msg(mid: str, role: str = "user", text: str | None = None) -> UIMessage:
    return UIMessage(id=mid, role=role, parts=[{"type": "text", "text": text or mid}])


def test_an_empty_assistant_placeholder_from_the_client_is_not_stored() -> None:
    # The AI SDK keeps an assistant message with only a step-start for a turn that failed
    # before any output; it comes back with the next request.
    placeholder = UIMessage(id="a1", role="assistant", parts=[{"type": "step-start"}])
    plan = reconcile([msg("u1")], [msg("u1"), placeholder, msg("u2")])
    assert [m.id for m in plan.append] == ["u2"]
    # Nor is a client's assistant message with content: only the server writes the assistant's
    # messages (the server refuses such a request before this; see test_client_authority).
    answered = UIMessage(id="a2", role="assistant", parts=[{"type": "step-start"}, {"type": "text", "text": "hi"}])
    assert [m.id for m in reconcile([msg("u1")], [msg("u1"), answered, msg("u2")]).append] == ["u2"]


def test_replacement_keeps_the_common_beginning_and_replaces_the_rest() -> None:
    stored = [msg("u1"), msg("a1", "assistant"), msg("u2"), msg("a2", "assistant")]
    assert replacement(stored, stored) == ([], [])
    cut, append = replacement(stored, [msg("u1"), msg("a1", "assistant"), msg("u2", text="edited")])
    assert cut == ["u2", "a2"] and [(m.id, m.parts[0]["text"]) for m in append] == [("u2", "edited")]
    cut, append = replacement(stored, [msg("u1"), msg("u3"), msg("a1", "assistant")])
    assert cut == ["a1", "u2", "a2"] and [m.id for m in append] == ["u3", "a1"]


async def test_replace_messages_waits_for_the_running_turn_then_replaces_the_history() -> None:
    agent = Think(ScriptedModel([Step(text="a slow answer " * 5)], delay=0.05), load_entrypoints=False)
    session = agent.session("s")
    turn = asyncio.create_task(session.chat("hello"))
    while not session.active_request_ids:
        await asyncio.sleep(0.01)
    stored = await session.replace_messages([msg("only")])  # queued behind the turn
    assert (await turn).status == "completed"
    assert [m.id for m in stored] == ["only"] and [m.id for m in await session.messages()] == ["only"]
    with pytest.raises(ValueError, match="twice"):
        await session.replace_messages([msg("x"), msg("x")])
    await agent.aclose()
