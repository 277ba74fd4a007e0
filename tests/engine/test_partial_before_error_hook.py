"""A failed turn's partial answer is stored before ``on_chat_error`` runs, so a plugin reading the
session there sees what the user saw; ``on_chat_response`` only ever gets a stored message."""

from __future__ import annotations

from typing import Any

from think_core import ScriptedModel, Step, hookimpl
from think_core.agent import Think
from think_core.types import ChatErrorContext, ChatResponseResult


class SessionReader:
    def __init__(self) -> None:
        self.agent: Think | None = None
        self.seen_in_error_hook: list[Any] = []
        self.responses: list[ChatResponseResult] = []

    @hookimpl
    async def on_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> str:
        assert self.agent is not None
        self.seen_in_error_hook = await self.agent.session(ctx.session.id).messages()
        return "the provider is having a bad day"

    @hookimpl
    async def on_chat_response(self, result: ChatResponseResult) -> None:
        self.responses.append(result)


def reading_agent(plugin: SessionReader, steps: list[Step]) -> Think:
    agent = Think(ScriptedModel(steps), store=":memory:", load_entrypoints=False, plugins=[plugin],
                  retry={"max_retries": 0})
    plugin.agent = agent
    return agent


async def test_on_chat_error_sees_the_partial_answer_already_stored() -> None:
    plugin = SessionReader()
    agent = reading_agent(plugin, [Step(text="half an ", error=RuntimeError("upstream fell over"), error_after_output=True)])
    try:
        session = agent.session("s")
        result = await session.chat("hi")
        assert result.status == "error" and result.error == "the provider is having a bad day"
        user, partial = plugin.seen_in_error_hook
        assert user.text == "hi"
        assert partial.role == "assistant" and partial.text == "half an "
        assert partial.metadata == {"error": "upstream fell over"}  # the error as it stood then
        # Stored again afterwards with the text on_chat_error settled on, under the same id.
        [_, stored] = await session.messages()
        assert stored.id == partial.id and stored.text == "half an "
        assert stored.metadata == {"error": "the provider is having a bad day"}
        [response] = plugin.responses
        assert response.message == stored
    finally:
        await agent.aclose()


async def test_on_chat_response_gets_no_message_when_none_was_stored() -> None:
    plugin = SessionReader()
    agent = reading_agent(plugin, [Step(error=RuntimeError("refused"))])
    try:
        session = agent.session("s")
        result = await session.chat("hi")
        assert result.status == "error"
        [user] = plugin.seen_in_error_hook  # no empty answer was stored; the error is noted on the question
        assert user.metadata == {"error": "refused"}
        [response] = plugin.responses
        assert response.status == "error" and response.message is None
        [stored_user] = await session.messages()
        assert stored_user.metadata == {"error": "the provider is having a bad day"}
    finally:
        await agent.aclose()
