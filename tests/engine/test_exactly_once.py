"""Every accepted submission is answered exactly once, by a turn that answers *its* message.

The dead owner of a submission is simulated by what a killed process leaves in the store: a
second store over the same file that claimed a submission and then stopped. (The crash loop,
``tests/engine/test_crash_loop.py``, kills real worker processes.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from think_core import Think, hookimpl
from think_core.messages import user_message
from think_core.models.base import ModelRequest, UserMessage
from think_core.models.scripted import ScriptedModel, Step
from think_core.store import SQLiteStore

LEASE = 2.0  # seconds: the dead owner's lease must expire before its submission is retaken


def answer_to_latest_user_message(request: ModelRequest) -> str:
    """The model's answer names the user message it sees last."""
    last = [m.content for m in request.messages if isinstance(m, UserMessage)][-1]
    return f"answer to {last}"


async def test_a_submission_held_by_a_dead_owner_is_answered_before_the_later_ones(tmp_path: Path) -> None:
    db = str(tmp_path / "think.db")
    with SQLiteStore(db) as dead:  # claimed #0, appended its message, then died (heartbeat fresh)
        first, _ = dead.create_submission("s", [user_message("first", id="u0")])
        dead.claim_next_submission("s", in_order=True)
        dead.apply_submission_messages("s", first.submission_id)
    model = ScriptedModel([answer_to_latest_user_message], repeat=True)
    agent = Think(model, store=db, submission_lease=LEASE, load_entrypoints=False)
    session = agent.session("s")
    later = [await session.submit_messages(text) for text in ("second", "third")]
    for row in [first, *later]:
        assert (await session.wait_for_submission(row.submission_id, timeout=30)).status == "completed"
    assert [(m.role, m.text) for m in await session.messages()] == [
        ("user", "first"), ("assistant", "answer to first"),
        ("user", "second"), ("assistant", "answer to second"),
        ("user", "third"), ("assistant", "answer to third"),
    ]
    await agent.aclose()


async def test_a_submission_turn_sees_the_history_up_to_its_own_message(tmp_path: Path) -> None:
    """Even if a later message is already stored, the turn answers its own message."""
    db = str(tmp_path / "think.db")
    with SQLiteStore(db) as dead:
        first, _ = dead.create_submission("s", [user_message("first", id="u0")])
        dead.claim_next_submission("s", in_order=True)
        dead.apply_submission_messages("s", first.submission_id)
        dead.append_messages("s", [user_message("added later", id="u1")])
    model = ScriptedModel([answer_to_latest_user_message], repeat=True)
    agent = Think(model, store=db, submission_lease=LEASE, load_entrypoints=False)
    session = agent.session("s")
    await session.open()
    assert (await session.wait_for_submission(first.submission_id, timeout=30)).status == "completed"
    assert [m.content for m in model.requests[0].messages if isinstance(m, UserMessage)] == ["first"]
    assert (await session.messages())[-1].text == "answer to first"
    await agent.aclose()


async def test_on_chat_response_runs_after_the_answer_and_the_completion_are_committed(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None, str | None]] = []

    class Inspect:
        @hookimpl
        async def on_chat_response(self, result: Any) -> None:
            row = await agent.session("s").inspect_submission(result.request_id)
            stored = [m.id for m in await agent.session("s").messages()]
            seen.append((row.status, row.answer_message_id, result.message.id if result.message.id in stored else None))

    agent = Think(ScriptedModel(["done"]), plugins=[Inspect()], store=str(tmp_path / "t.db"), load_entrypoints=False)
    session = agent.session("s")
    accepted = await session.submit_messages("go")
    done = await session.wait_for_submission(accepted.submission_id, timeout=30)
    assert done.status == "completed" and done.answer_message_id is not None
    assert seen == [("completed", done.answer_message_id, done.answer_message_id)]
    await agent.aclose()


async def test_a_turn_whose_submission_was_retaken_stores_no_answer(tmp_path: Path) -> None:
    """A live owner that lost its lease (another store retook the row) must not answer it too."""
    db = str(tmp_path / "t.db")
    responses: list[str] = []

    class Responses:
        @hookimpl
        def on_chat_response(self, result: Any) -> None:
            responses.append(result.status)

    slow = ScriptedModel([Step(text=" ".join(["working"] * 400))], delay=0.02)
    agent = Think(slow, plugins=[Responses()], store=db, submission_lease=LEASE, load_entrypoints=False)
    session = agent.session("s")
    accepted = await session.submit_messages("long job")
    for _ in range(1000):
        if slow.requests:
            break
        await asyncio.sleep(0.01)
    with SQLiteStore(db) as other:
        assert [r.submission_id for r in other.retake_stale_submissions("s")] == [accepted.submission_id]
        for _ in range(3000):  # the heartbeat notices within a third of the lease and cancels
            if not session.active_request_ids:
                break
            await asyncio.sleep(0.01)
        assert not session.active_request_ids
        assert other.get_submission("s", accepted.submission_id).status == "running"  # still the other's
        assert [m.role for m in other.list_messages("s")] == ["user"]
    assert responses == []
    await agent.aclose()
