"""Cancellation frees a turn wherever it waits, on_chat_response included."""
import asyncio

from think_core import ScriptedModel, Think, hookimpl


class Hung:
    @hookimpl
    async def on_chat_response(self, result):
        await asyncio.Event().wait()

async def test_cancel_frees_a_turn_waiting_in_on_chat_response():
    agent = Think(ScriptedModel(["hi"]), plugins=[Hung()], load_entrypoints=False)
    s = agent.session("x")
    task = asyncio.create_task(s.chat("hello"))
    for _ in range(500):
        await asyncio.sleep(0.01)
        if s.active_request_ids and len(await s.messages()) == 2:
            break
    assert s.cancel_all() == 1
    result = await asyncio.wait_for(task, 10)
    assert result.status == "completed" and result.text == "hi"
    await agent.aclose()
