"""Every entry path runs the same turn and fires the same hooks: triggers, continuation, durability."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from tests.recorder import Recorder
from think_core import NestedTurnError, hookimpl, tool
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.store import SQLiteStore

TURN_HOOKS = ["before_turn", "before_step", "on_step_finish", "on_chat_response"]


def turn_hooks(rec: Recorder) -> list[str]:
    return [h for h in rec.names() if h in TURN_HOOKS]


@tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (needs a human's approval)."""
    return f"deleted {path}"


async def _chat(session, rec):
    return await session.chat("hi")


async def _stream(session, rec):
    chunks = [c async for c in session.stream("hi")]
    assert chunks[0]["type"] == "start" and chunks[-1]["type"] == "finish"
    return None


async def _save(session, rec):
    return await session.save_messages([{"role": "user", "parts": [{"type": "text", "text": "hi"}]}])


async def _submit(session, rec):
    accepted = await session.submit_messages("hi")
    assert accepted.accepted and accepted.status in ("pending", "running")
    done = await session.wait_for_submission(accepted.submission_id, timeout=5)
    assert done.status == "completed"
    return None


async def _continue(session, rec):
    await session.add_messages([{"role": "assistant", "parts": [{"type": "text", "text": "Once upon"}]}])
    return await session.continue_last_turn()


async def _client_tool(session, rec):
    first = await session.chat("where am I?", body={"clientTools": [{"name": "get_location", "description": "Ask the browser."}]})
    pending = [p for p in first.message.parts if p["type"] == "tool-get_location"]
    assert pending and pending[0]["state"] == "input-available"
    rec.calls.clear()
    return await session.add_tool_result(pending[0]["toolCallId"], {"city": "Lisbon"})


async def _approval(session, rec):
    first = await session.chat("delete it")
    pending = [p for p in first.message.parts if p["type"] == "tool-delete_file"]
    assert pending and pending[0]["state"] == "approval-requested"
    rec.calls.clear()
    return await session.approve_tool_call(pending[0]["toolCallId"], True)


def _script_for(path: str) -> ScriptedModel:
    if path == "client_tool":
        return ScriptedModel([Step(tool_calls=[call("get_location")]), "You are in Lisbon."])
    if path == "approval":
        return ScriptedModel([Step(tool_calls=[call("delete_file", {"path": "/tmp/x"})]), "Deleted."])
    return ScriptedModel(["Hello!"])


@pytest.mark.parametrize(
    ("path", "runner", "trigger", "continuation"),
    [
        ("chat", _chat, "chat", False),
        ("stream", _stream, "stream", False),
        ("save_messages", _save, "save_messages", False),
        ("submit", _submit, "submit", False),
        ("continue", _continue, "continue", True),
        ("client_tool", _client_tool, "auto_continue", True),
        ("approval", _approval, "auto_continue", True),
    ],
)
async def test_every_entry_path_fires_the_same_hooks(path, runner, trigger, continuation):
    rec = Recorder()
    agent = Think(_script_for(path), tools=[delete_file], plugins=[rec], load_entrypoints=False)
    session = agent.session("s")
    result = await runner(session, rec)
    if result is not None:
        assert result.status == "completed"
        assert result.continuation is continuation
    assert turn_hooks(rec) == ["before_turn", "before_step", "on_step_finish", "on_chat_response"]
    (turn_ctx,) = rec.contexts["before_turn"][-1:]
    assert (turn_ctx.trigger, turn_ctx.continuation) == (trigger, continuation)
    assert rec.contexts["on_chat_response"][-1].continuation is continuation
    await session.aclose()


async def test_approved_call_runs_through_before_tool_call_and_result_is_written_back():
    rec = Recorder()
    agent = Think(_script_for("approval"), tools=[delete_file], plugins=[rec], load_entrypoints=False)
    session = agent.session("s")
    first = await session.chat("delete it")
    call_id = first.message.parts[-1]["toolCallId"]
    # Decided before anyone is asked (a guard's block would have spared the human), then again
    # when the approved call runs.
    assert [c.tool_call_id for c in rec.contexts["before_tool_call"]] == [call_id]
    result = await session.approve_tool_call(call_id, True)
    assert result.text == "Deleted."
    assert [c.tool_call_id for c in rec.contexts["before_tool_call"]] == [call_id, call_id]
    earlier = next(m for m in await session.messages() if m.id == first.message.id)
    part = next(p for p in earlier.parts if p.get("toolCallId") == call_id)
    assert part["state"] == "output-available" and part["output"] == "deleted /tmp/x"
    tool_msg = agent.model.requests[1].messages[-1]
    assert tool_msg.role == "tool" and tool_msg.output == "deleted /tmp/x"


async def test_denied_call_is_answered_with_an_error_and_never_runs():
    ran: list[str] = []

    @tool(needs_approval=True)
    def wipe() -> str:
        """Wipe everything."""
        ran.append("wipe")
        return "wiped"

    model = ScriptedModel([Step(tool_calls=[call("wipe")]), "Understood, not wiping."])
    agent = Think(model, tools=[wipe], load_entrypoints=False)
    session = agent.session("s")
    first = await session.chat("wipe it")
    result = await session.approve_tool_call(first.message.parts[-1]["toolCallId"], False, reason="too risky")
    assert result.status == "completed" and ran == []
    tool_msg = model.requests[1].messages[-1]
    assert tool_msg.is_error and tool_msg.output == "too risky"


async def test_parallel_client_calls_continue_only_after_both_results():
    model = ScriptedModel(
        [Step(tool_calls=[call("ask_a", {}, id="ca"), call("ask_b", {}, id="cb")]), "Both answered."]
    )
    rec = Recorder()
    agent = Think(model, plugins=[rec], load_entrypoints=False)
    session = agent.session("s")
    body = {"clientTools": [{"name": "ask_a"}, {"name": "ask_b"}]}
    await session.chat("ask both", body=body)
    assert await session.add_tool_result("ca", "A") is None
    assert len(model.requests) == 1 and rec.names().count("before_turn") == 1
    result = await session.add_tool_result("cb", "B")
    assert result is not None and result.text == "Both answered."
    results = [m for m in model.requests[1].messages if m.role == "tool"]
    assert [(r.tool_call_id, r.output) for r in results] == [("ca", "A"), ("cb", "B")]
    # A repeated result for a settled call is ignored.
    assert await session.add_tool_result("ca", "again") is None
    with pytest.raises(KeyError):
        await session.add_tool_result("nope", 1)


async def test_chaining_from_on_chat_response_runs_a_second_turn():
    class Chainer:
        name = "chainer"

        def __init__(self):
            self.chained = False
            self.results = []

        @hookimpl
        async def on_chat_response(self, result):
            if not self.chained:
                self.chained = True
                self.results.append(await result.session.save_messages("and then?"))

    chainer = Chainer()
    agent = Think(ScriptedModel(["first", "second"]), plugins=[chainer], load_entrypoints=False)
    first = await asyncio.wait_for(agent.session("s").chat("go"), 5)
    assert first.text == "first"
    assert chainer.results[0].text == "second"
    texts = [m.text for m in await agent.session("s").messages()]
    assert texts == ["go", "first", "and then?", "second"]


async def test_nested_calls_from_hooks_raise_but_submit_and_add_are_allowed():
    errors: list[Exception] = []
    accepted: list[Any] = []

    class Nester:
        name = "nester"

        @hookimpl
        async def before_turn(self, ctx):
            if ctx.trigger == "chat":
                for entry in (ctx.session.save_messages("x"), ctx.session.continue_last_turn()):
                    try:
                        await entry
                    except NestedTurnError as exc:
                        errors.append(exc)
                accepted.append(await ctx.session.submit_messages("later", idempotency_key="k"))
                await ctx.session.add_messages("note")

    agent = Think(ScriptedModel(["now", "later answer"]), plugins=[Nester()], load_entrypoints=False)
    session = agent.session("s")
    result = await asyncio.wait_for(session.chat("go"), 5)
    assert result.status == "completed" and len(errors) == 2
    done = await session.wait_for_submission(accepted[0].submission_id, timeout=5)
    assert done.status == "completed"
    texts = [m.text for m in await session.messages()]
    assert texts == ["go", "note", "now", "later", "later answer"]


async def test_submissions_idempotency_conflicts_and_cancel(tmp_path):
    model = ScriptedModel(["one", "two"], delay=0.01)
    agent = Think(model, store=str(tmp_path / "s.db"), load_entrypoints=False)
    session = agent.session("s")
    a = await session.submit_messages("first", idempotency_key="key-1")
    again = await session.submit_messages("first (retried)", idempotency_key="key-1")
    assert again.accepted is False and again.submission_id == a.submission_id
    await session.submit_messages("second", submission_id="sub-2")
    with pytest.raises(ValueError):
        await session.submit_messages("x", submission_id="sub-2", idempotency_key="key-1")
    assert await session.cancel_submission("sub-2") is True
    done = await session.wait_for_submission(a.submission_id, timeout=5)
    assert done.status == "completed"
    assert (await session.inspect_submission("sub-2")).status == "aborted"
    texts = [m.text for m in await session.messages()]
    assert texts == ["first", "one"]  # the cancelled submission's message was never appended
    assert [s.status for s in await session.list_submissions()] == ["completed", "aborted"]
    await session.aclose()
    agent.close()


async def test_skipped_continue_when_last_message_is_not_the_assistants():
    agent = Think(ScriptedModel([]), load_entrypoints=False)
    result = await agent.session("s").continue_last_turn()
    assert result.status == "skipped"


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from think_core.agent import Think
    from think_core.models.scripted import ScriptedModel, Step

    async def main():
        model = ScriptedModel([Step(text=" ".join(["slow"] * 1000))], delay=0.05)
        agent = Think(model, store=sys.argv[1], load_entrypoints=False, submission_lease=1.0)
        session = agent.session("durable")
        accepted = await session.submit_messages("please answer", idempotency_key="crash-key")
        print(accepted.submission_id, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_a_submission_survives_sigkill_mid_turn(tmp_path):
    db = str(tmp_path / "durable.db")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, db], stdout=subprocess.PIPE, text=True, env={**os.environ, "THINK_PLUGINS": ""}
    )
    try:
        submission_id = child.stdout.readline().strip()
        assert submission_id
        probe = SQLiteStore(db)
        deadline = time.monotonic() + 10
        while True:
            row = probe.get_submission("durable", submission_id)
            if row.status == "running" and row.messages_applied:
                break
            assert time.monotonic() < deadline, "the child never started the turn"
            await asyncio.sleep(0.05)
        probe.close()
        await asyncio.sleep(0.2)  # mid-stream
        child.send_signal(signal.SIGKILL)
        child.wait(5)
        await asyncio.sleep(1.1)  # the dead process's lease on the submission expires
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)
        child.stdout.close()

    model = ScriptedModel(["Recovered answer."])
    agent = Think(model, store=db, load_entrypoints=False, submission_lease=1.0)
    session = agent.session("durable")
    await session.open()
    done = await session.wait_for_submission(submission_id, timeout=5)
    assert done.status == "completed"
    messages = await session.messages()
    assert [(m.role, m.text) for m in messages] == [("user", "please answer"), ("assistant", "Recovered answer.")]
    again = await session.submit_messages("please answer", idempotency_key="crash-key")
    assert again.accepted is False and again.status == "completed"
    await asyncio.sleep(0.05)
    assert len(model.requests) == 1  # the resubmit did not run a second turn
    await session.aclose()
    agent.close()


async def test_clear_waits_for_cancelled_turns_so_nothing_reappears():
    model = ScriptedModel([Step(text=" ".join(["word"] * 100))], delay=0.01)
    agent = Think(model, load_entrypoints=False)
    session = agent.session("s")
    running = asyncio.create_task(session.chat("talk"))
    await asyncio.sleep(0.05)
    await session.clear()
    assert (await running).status == "aborted"
    assert await session.messages() == []


async def test_a_live_process_keeps_its_running_submission(tmp_path):
    """A second agent opening the same session must not run a submission another live agent is
    running (its heartbeat is fresh); it recovers it only once the lease expired."""
    db = str(tmp_path / "shared.db")
    # Leases in seconds: the other agent now keeps polling while the owner runs, and a busy
    # machine must not delay the owner's heartbeat past the lease.
    slow = ScriptedModel([Step(text=" ".join(["working"] * 200))], delay=0.02)
    owner = Think(slow, store=db, load_entrypoints=False, submission_lease=2.0)
    owner_session = owner.session("s")
    accepted = await owner_session.submit_messages("long job")
    while (await owner_session.inspect_submission(accepted.submission_id)).status != "running":
        await asyncio.sleep(0.01)

    other_model = ScriptedModel(["should not run"])
    other = Think(other_model, store=db, load_entrypoints=False, submission_lease=2.0)
    await asyncio.sleep(2.2)  # longer than the lease: only the heartbeat keeps it claimed
    await other.session("s").open()
    done = await owner_session.wait_for_submission(accepted.submission_id, timeout=10)
    assert done.status == "completed"
    await asyncio.sleep(0.05)
    assert other_model.requests == []
    texts = [m.text for m in await owner_session.messages()]
    assert texts[0] == "long job" and len(texts) == 2
    await owner.aclose()
    await other.aclose()


async def test_clear_skips_pending_submissions():
    model = ScriptedModel([Step(text=" ".join(["busy"] * 50))], delay=0.01, repeat=True)
    agent = Think(model, load_entrypoints=False)
    session = agent.session("s")
    first = await session.submit_messages("one")
    second = await session.submit_messages("two")
    while (await session.inspect_submission(first.submission_id)).status != "running":
        await asyncio.sleep(0.01)
    await session.clear()
    assert (await session.wait_for_submission(first.submission_id, timeout=5)).status == "aborted"
    skipped = await session.wait_for_submission(second.submission_id, timeout=5)
    assert skipped.status == "skipped" and "cleared" in skipped.error
    await asyncio.sleep(0.05)
    assert await session.messages() == []
    assert len(model.requests) == 1  # the skipped submission never ran
    await session.aclose()
