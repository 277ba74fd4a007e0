"""An edit of an earlier user message and a regeneration of an answer are durable submissions:
what they replace is deleted in the transaction that appends the (edited) message, under the
turn lock, and the same request sent again follows or replays that submission instead of
answering twice (real uvicorn server and httpx client, a SQLite file)."""

from __future__ import annotations

from pathlib import Path

from tests.support import agents
from tests.support.http_chat import api, post_chat, transport_body
from tests.support.web import roles, ui_text, user
from think_core.durable.crash_recovery import REPLACING_KEY, recovery_action
from think_core.models.scripted import ScriptedModel, Step
from think_core.store import Submission


async def test_a_regeneration_is_a_submission_and_the_same_regeneration_again_answers_nothing_new(tmp_path: Path) -> None:
    model = ScriptedModel([Step(text="First answer."), Step(text="Second answer."), Step(text="Never.")])
    agent = agents.make_agent(model, store=str(tmp_path / "r.db"))
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("s", [user("Hello", "u1")]))
        a1 = first[0]["messageId"]
        regenerate = {**transport_body("s", [user("Hello", "u1")]), "trigger": "regenerate-message", "messageId": a1}
        _, again = await post_chat(http, regenerate)
        _, repeated = await post_chat(http, regenerate)
        history = (await http.get("/api/sessions/s/messages")).json()["messages"]
        rows = (await http.get("/api/sessions/s/submissions")).json()["submissions"]
    a2 = again[0]["messageId"]
    assert ui_text(again) == "Second answer." and a2 != a1
    assert ui_text(repeated) == "Second answer." and repeated[0]["messageId"] == a2  # replayed
    assert roles(history) == [("user", "u1"), ("assistant", a2)]
    assert len(model.requests) == 2
    assert [(r["idempotency_key"], r["status"]) for r in rows] == [("u1", "completed"), (f"regenerate:{a1}", "completed")]
    assert rows[1]["metadata"][REPLACING_KEY] == a1 and rows[1]["answer_message_id"] == a2


async def test_an_edit_is_a_submission_that_replaces_the_message_and_what_followed(tmp_path: Path) -> None:
    model = ScriptedModel([Step(text="One."), Step(text="Two."), Step(text="Edited answer."), Step(text="Never.")])
    agent = agents.make_agent(model, store=str(tmp_path / "e.db"))
    async with api(agent) as http:
        _, first = await post_chat(http, transport_body("s", [user("Hello", "u1")]))
        a1 = first[0]["messageId"]
        await post_chat(http, transport_body("s", [user("Hello", "u1"), {"id": a1, "role": "assistant", "parts": []},
                                                  user("More", "u2")]))
        edit = {**transport_body("s", [user("Hello, edited", "u1")]), "messageId": "u1"}
        _, edited = await post_chat(http, edit)
        _, repeated = await post_chat(http, edit)
        history = (await http.get("/api/sessions/s/messages")).json()["messages"]
        rows = (await http.get("/api/sessions/s/submissions")).json()["submissions"]
    assert ui_text(edited) == ui_text(repeated) == "Edited answer." and len(model.requests) == 3
    assert roles(history) == [("user", "u1"), ("assistant", edited[0]["messageId"])]
    assert history[0]["parts"] == [{"type": "text", "text": "Hello, edited"}]
    assert [r["idempotency_key"].split(":")[0] for r in rows] == ["u1", "u2", "edit"]
    assert rows[2]["status"] == "completed" and rows[2]["metadata"][REPLACING_KEY] == "u1"


def test_an_unapplied_rewrite_is_applied_again_after_a_crash() -> None:
    # Its messages may all be stored (a regeneration's user message, an edit's same id) while
    # what it replaces is not yet deleted: only applying it again is right.
    row = Submission(submission_id="r", request_id="r", session_id="s", status="running", messages=[],
                     metadata={REPLACING_KEY: "a1"}, created_at=0.0)
    assert recovery_action(row, []) == "requeue"
    assert recovery_action(row.model_copy(update={"messages_applied": True}), []) == "answer"
