"""Files in a long history (issue 29 item 2): compaction summarises around them without losing
them — the summary message keeps the files users sent in the range it replaces, so the model
still gets the image — and neither the summariser nor the token estimate ever reads a file's
base64 as text."""

from __future__ import annotations

from typing import Any

from tests.support.agents import make_agent
from tests.support.provider_files import PNG, PNG_URL
from think_core.models.base import UserMessage
from think_core.models.content import FilePart, TextPart
from think_core.models.scripted import ScriptedModel
from think_core.turn.compaction import estimate_tokens, transcript
from think_core.types import UIMessage

IMAGE = {"type": "file", "mediaType": "image/png", "filename": "dot.png", "url": PNG_URL}


async def test_compaction_keeps_the_files_of_the_range_it_summarises() -> None:
    seen: list[str] = []

    def summarizer(messages: Any, budget: int) -> str:
        seen.append(transcript(messages, budget))
        return "The user showed a dot."

    model = ScriptedModel(["It is a dot."])
    agent = make_agent(model, store=":memory:", summarizer=summarizer,
                       compaction={"protect_head": 1, "tail_tokens": 50, "min_tail_messages": 2})
    session = agent.session("s")
    filler = "lorem ipsum " * 60
    await session.add_messages([
        {"role": "user", "parts": [{"type": "text", "text": "Hello."}]},
        {"role": "assistant", "parts": [{"type": "text", "text": "Hi."}]},
        {"role": "user", "parts": [{"type": "text", "text": "What is this? " + filler}, IMAGE]},
        {"role": "assistant", "parts": [{"type": "text", "text": "A dot. " + filler}]},
        {"role": "user", "parts": [{"type": "text", "text": "Sure? " + filler}]},
        {"role": "assistant", "parts": [{"type": "text", "text": "Yes. " + filler}]},
    ])
    result = await session.compact()
    assert result is not None and result.compacted_messages >= 2  # the image's message is in the range
    assert "[file image/png dot.png]" in seen[0] and PNG not in seen[0]

    await session.chat("And the colour?")
    [summary] = [m for m in model.requests[0].messages
                 if isinstance(m, UserMessage) and "The user showed a dot." in m.text]
    assert isinstance(summary.content, list)
    assert [p for p in summary.content if isinstance(p, FilePart)] == [
        FilePart(media_type="image/png", data=PNG, filename="dot.png")]
    assert isinstance(summary.content[0], TextPart)


def test_the_token_estimate_does_not_read_base64_as_text() -> None:
    big = "A" * 4_000_000  # a 3 MB image as base64
    tool_part = {"type": "tool-snapshot", "toolCallId": "c1", "state": "output-available", "input": {},
                 "output": [{"type": "text", "text": "Screen:"},
                            {"type": "file", "mediaType": "image/png", "url": f"data:image/png;base64,{big}"}]}
    messages = [UIMessage(id="u", role="user", parts=[{"type": "text", "text": "Look."},
                                                     {**IMAGE, "url": f"data:image/png;base64,{big}"}]),
                UIMessage(id="a", role="assistant", parts=[tool_part])]
    assert estimate_tokens(messages) < 100
