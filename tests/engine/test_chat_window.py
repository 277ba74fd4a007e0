"""A chat request reads only the end of a long history (see ``request_window``) and still
decides as if it had read all of it: a call waiting far back in the history is still checked,
and a regeneration named by ``messageId`` alone still finds the message it answers again."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import agents
from tests.support.messages import msg
from tests.support.tools import send_email
from think_core import ClientRequestRefused
from think_core.chat.transcript import ClientTranscript
from think_core.models.scripted import ScriptedModel, Step
from think_core.turn.pending_calls import ToolAnswer
from think_core.types import UIMessage


def long_history(n: int) -> list[UIMessage]:
    """A call awaiting approval in the second message, then ``n`` user / assistant pairs."""
    waiting = {"type": "tool-send_email", "toolCallId": "c1", "state": "approval-requested", "input": {"to": "ada"}}
    history = [msg("u0", "mail ada"), UIMessage(id="a0", role="assistant", parts=[waiting])]
    for i in range(1, n + 1):
        history += [msg(f"u{i}", f"question {i}"), msg(f"a{i}", f"answer {i}", role="assistant")]
    return history


async def consume(chunks: Any) -> list[dict[str, Any]]:
    return [chunk async for chunk in chunks]


async def test_an_answer_to_a_call_far_back_is_still_checked() -> None:
    agent = agents.make_agent(ScriptedModel([Step(text="ok")] * 3), tools=[send_email], store=":memory:")
    session = agent.session("long")
    await session.open()
    agent.store.append_messages("long", long_history(20))
    before = agent.store.list_messages("long")
    # Only the new message is sent; the result comes beside it, for a call awaiting an approval.
    request = ClientTranscript(messages=[msg("u21", "and?")], answers=[ToolAnswer("c1", output="sent")])
    with pytest.raises(ClientRequestRefused, match="waiting for an approval"):
        await consume(session.stream_transcript(request))
    assert agent.store.list_messages("long") == before  # refused before anything was stored


async def test_a_regeneration_named_by_message_id_alone_answers_the_message_before_it() -> None:
    agent = agents.make_agent(ScriptedModel([Step(text="answer 5, again")]), store=":memory:")
    session = agent.session("long")
    await session.open()
    agent.store.append_messages("long", long_history(8))
    # The client keeps nothing of the transcript and names the answer to redo (a5, far back).
    request = ClientTranscript(messages=[], trigger="regenerate-message", message_id="a5")
    await consume(session.stream_transcript(request))
    await session.submissions_drained()
    stored = agent.store.list_messages("long")
    assert [m.id for m in stored[:-1]] == ["u0", "a0"] + [f"{r}{i}" for i in range(1, 5) for r in "ua"] + ["u5"]
    assert stored[-1].role == "assistant" and stored[-1].parts[-1] == {"type": "text", "text": "answer 5, again"}
    row = agent.store.get_submission_by_key("long", "regenerate:a5")  # run as a durable rewrite
    assert row is not None and row.status == "completed" and row.answer_message_id == stored[-1].id
