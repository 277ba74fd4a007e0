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


async def test_a_tool_call_cut_off_by_cancel_is_stored_with_an_error_result():
    from think_core import tool
    from think_core.models.scripted import Step, call

    started = asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Never returns."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    agent = Think(ScriptedModel([Step(tool_calls=[call("wait_forever", {}, id="c1")])]), tools=[wait_forever],
                  load_entrypoints=False)
    s = agent.session("x")
    task = asyncio.create_task(s.chat("go", request_id="r1"))
    await asyncio.wait_for(started.wait(), 10)
    assert s.cancel("r1")
    assert (await asyncio.wait_for(task, 10)).status == "aborted"
    [part] = [p for p in (await s.messages())[-1].parts if p.get("toolCallId") == "c1"]
    assert part["state"] == "output-error" and "cancelled" in part["errorText"]
    await agent.aclose()
