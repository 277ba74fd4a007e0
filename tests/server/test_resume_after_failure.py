"""A reloaded page's resume probe (``useChat({ resume: true })``: ``GET /api/chat/{id}/stream``)
after a turn that failed before any output (issue 33: in 1 of 40 loaded runs of the pinned AI SDK
client the reloaded page never reached "ready").

Such a turn's stream is its ``error`` chunk alone (``start`` is held back until the answer shows
something), and the failure is stored (in the user message's ``metadata.error``) before that
stream ends: ``on_chat_error`` runs after the store, ``on_chat_response`` before the end. A probe
in that window used to replay the error, which then became the reloaded page's own error. It now
answers 204, as once the stream has ended: the turn left no message to resume, and the history
holds its failure. Each window is forced by holding the turn at the hook, never by timing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tests.support import agents
from tests.support.web import ui_text, user
from think_core import hookimpl
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step
from think_core.server import create_app
from think_core.server.testing import running_server

TIMEOUT = 20.0
DEADLINE = 60.0

make_agent = agents.make_agent.using(store=":memory:")


class Hold:
    """Holds the turn in one hook (``on_chat_error`` or ``on_chat_response``) until released."""

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def _hold(self, hook: str) -> None:
        if hook == self.hook:
            self.entered.set()
            await self.release.wait()

    @hookimpl
    async def on_chat_error(self, error: BaseException, ctx: Any) -> None:
        await self._hold("on_chat_error")

    @hookimpl
    async def on_chat_response(self, result: Any) -> None:
        await self._hold("on_chat_response")


def failing_agent(hold: Hold) -> Think:
    return make_agent(ScriptedModel([Step(error=RuntimeError("fails on purpose"))]), plugins=[hold])


async def probe(http: httpx.AsyncClient) -> int:
    """The reloaded page's resume probe; its status once the server has decided."""
    async with http.stream("GET", "/api/chat/s1/stream") as response:
        return response.status_code


async def send(http: httpx.AsyncClient) -> httpx.Response:
    body = {"id": "s1", "messages": [user("please fail", "u1")], "trigger": "submit-message"}
    return await http.post("/api/chat", json=body)


async def stored_error(agent: Think) -> str | None:
    messages = await agent.session("s1").messages()
    return (messages[-1].metadata or {}).get("error") if messages else None


async def test_a_probe_after_the_failure_is_stored_and_before_the_stream_ends_is_204() -> None:
    hold = Hold("on_chat_response")
    agent = failing_agent(hold)
    async with running_server(create_app(agent)) as base, httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        sending = asyncio.create_task(send(http))
        await asyncio.wait_for(hold.entered.wait(), DEADLINE)
        # The page reloads now: the failure is in the history, the stream has not ended yet.
        assert await stored_error(agent) == "fails on purpose"
        assert (live := agent.session("s1").streams.current) is not None and live.streaming
        assert await probe(http) == 204
        hold.release.set()
        sent = await asyncio.wait_for(sending, DEADLINE)
        # The page that sent the message still gets the error as its request's.
        assert '"type":"error"' in sent.text and "fails on purpose" in sent.text
        assert await probe(http) == 204


async def test_a_probe_waiting_when_the_turn_fails_is_204() -> None:
    """The probe arrives while the turn has sent nothing yet (held in ``on_chat_error``, the
    failure already stored): it follows the stream, and the first chunk, an error, makes it 204."""
    hold = Hold("on_chat_error")
    agent = failing_agent(hold)
    async with running_server(create_app(agent)) as base, httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        sending = asyncio.create_task(send(http))
        await asyncio.wait_for(hold.entered.wait(), DEADLINE)
        assert await stored_error(agent) == "fails on purpose"
        live = agent.session("s1").streams.current
        assert live is not None and live.streaming and live.chunks == []
        probing = asyncio.create_task(probe(http))
        # Released only once the probe has reached the stream (it waits for its first chunk) —
        # or has been answered without waiting, which is the old behaviour the assert rejects.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        while not probing.done() and not live._waiters:
            assert loop.time() < deadline, "the probe never reached the stream"
            await asyncio.sleep(0.01)
        hold.release.set()
        assert await asyncio.wait_for(probing, DEADLINE) == 204
        await asyncio.wait_for(sending, DEADLINE)


async def test_a_probe_during_a_turn_that_shows_something_still_replays_it() -> None:
    """The other side of the rule: a turn that fails after its first words left a message, and a
    probe in the same window replays it from its first chunk (its error included)."""
    hold = Hold("on_chat_response")
    model = ScriptedModel([Step(text="Half an answer", error=RuntimeError("cut off"), error_after_output=True)])
    agent = make_agent(model, plugins=[hold])
    async with running_server(create_app(agent)) as base, httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        sending = asyncio.create_task(send(http))
        await asyncio.wait_for(hold.entered.wait(), DEADLINE)
        async with http.stream("GET", "/api/chat/s1/stream") as resumed:
            assert resumed.status_code == 200
            hold.release.set()
            replay = [line[6:] async for line in resumed.aiter_lines() if line.startswith("data: ")]
        await asyncio.wait_for(sending, DEADLINE)
    assert replay[-1] == "[DONE]", replay
    chunks = [json.loads(line) for line in replay[:-1]]
    assert chunks[0]["type"] == "start" and chunks[-1] == {"type": "error", "errorText": "cut off"}, chunks
    assert ui_text(chunks) == "Half an answer"


async def test_a_websocket_client_connecting_after_the_failure_is_told_nothing_streams() -> None:
    """The same window over the agents protocol: a tab that (re)connects while the failed turn's
    stream is still open hears ``cf_agent_stream_resume_none`` — not ``resuming`` and a replay of
    the lone error, which would become that tab's own error."""
    from tests.support.ws import client, serve

    hold = Hold("on_chat_response")
    agent = failing_agent(hold)
    async with serve(agent) as base, httpx.AsyncClient(base_url=base.replace("ws://", "http://"), timeout=TIMEOUT) as http:
        sending = asyncio.create_task(send(http))
        await asyncio.wait_for(hold.entered.wait(), DEADLINE)
        assert (live := agent.session("s1").streams.current) is not None and live.streaming
        async with client(base, "s1") as tab:
            await tab.recv()  # the history, with the failure
            assert [f["type"] for f in tab.opening] == [
                "cf_agent_chat_messages", "cf_agent_stream_resume_none", "cf_agent_identity"]
            await tab.send({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
            answer, _ = await tab.until(lambda f: f.get("probeId") == "p1")
            assert answer["type"] == "cf_agent_stream_resume_none"
        hold.release.set()
        await asyncio.wait_for(sending, DEADLINE)
