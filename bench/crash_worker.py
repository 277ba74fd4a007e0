"""A worker process for the crash loop: it submits a session's messages durably and drains them,
and, when told to, kills itself with SIGKILL at one marked point of a turn.

    python bench/crash_worker.py DB SESSION MESSAGES [--lease 2] [--via submit|chat]

``--via chat`` sends each message the way the server's chat endpoints do (a client's
transcript through ``Session.stream_transcript``, one chat after the other, each stream read to
its end; the message id ``m<i>`` is the key), instead of ``submit_messages``.

Environment: ``THINK_CRASH_POINT`` names the point (one of :data:`POINTS`), ``THINK_CRASH_AT``
its occurrence in this process (1-based, default 1), ``THINK_CRASH_TOOL`` the tool whose
start counts for ``tool_started`` (default: either). Without ``THINK_CRASH_POINT`` it just
drains and exits 0. With ``THINK_KEYED_RECORD`` set, ``record`` honours its call's idempotency
key (``@tool(idempotent_with_key=True)``) the way a payment API does: the key of every attempt
goes to ``DB.attempts``, and the effect is made only for a key the ledger (``DB.keys``) has
not seen.

Each turn answers "message <i>": step 0 calls ``lookup`` (idempotent), step 1 calls ``record``
(not idempotent), step 2 answers with text derived from the message and both results
(:func:`expected_answer`). Both tools append a line to ``DB.effects`` (fsync'ed) each time
they run, so re-executions are counted across processes; ``after_tool_call`` appends what it
saw to ``DB.tools`` (JSON lines). :func:`audit` reads a finished database back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from think_core import Think, ToolContext, Usage, hookimpl, tool  # noqa: E402
from think_core.chat.transcript import ClientTranscript  # noqa: E402
from think_core.models.base import ModelRequest, ToolMessage, UserMessage  # noqa: E402
from think_core.models.scripted import ScriptedModel, Step, call  # noqa: E402
from think_core.store import SQLiteStore  # noqa: E402
from think_core.types import UIMessage  # noqa: E402
from think_plugins.budget import Budget  # noqa: E402
from think_plugins.fallback import Fallback  # noqa: E402
from think_plugins.redact import Redact  # noqa: E402

#: ``redact`` is loaded too: the answers' opening words are rewritten as they stream (split
#: across the scripted pieces), and the audit expects exactly the rewritten answer.
REDACT = {"patterns": [r"Answer to"], "replacement": "Reply to"}

#: What each model step of the script uses: an answer (three steps) records three times this,
#: whatever crashes it went through — a step replayed from the journal is not counted again.
STEP_USAGE = Usage(input_tokens=7, output_tokens=3, total_tokens=10)

POINTS = (
    "streaming", "tool_started", "tool_finished", "step_finished", "answer_stored", "on_chat_response",
    "after_finish",
)
SETTLED = ("output-available", "output-error")

_seen: Counter[str] = Counter()


def crash_point(point: str) -> None:
    """SIGKILL this process at the configured occurrence of ``point``."""
    if os.environ.get("THINK_CRASH_POINT") != point:
        return
    _seen[point] += 1
    if _seen[point] == int(os.environ.get("THINK_CRASH_AT", "1")):
        os.kill(os.getpid(), signal.SIGKILL)


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _tools(db: str) -> list[Any]:
    effects = db + ".effects"

    def ran(name: str, arg: str) -> None:
        _append(effects, f"{name}\t{arg}")
        if os.environ.get("THINK_CRASH_TOOL", name) == name:
            crash_point("tool_started")  # after the effect: the worst moment to die

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """Look a key up (safe to repeat)."""
        ran("lookup", key)
        return f"value of {key}"

    @tool
    def record(note: str) -> str:
        """Record a note (a side effect that must not happen twice)."""
        ran("record", note)
        return f"recorded {note}"

    @tool(name="record", idempotent_with_key=True)
    def keyed_record(note: str, ctx: ToolContext) -> str:
        """Record a note (a side effect made once per idempotency key, like a payment)."""
        _append(db + ".attempts", json.dumps({"key": ctx.idempotency_key, "note": note, "pid": os.getpid()}))
        keys = Path(db + ".keys")
        if ctx.idempotency_key in (keys.read_text().splitlines() if keys.exists() else []):
            return f"recorded {note}"  # the service answers a repeated key as it did the first time
        _append(str(keys), ctx.idempotency_key)
        ran("record", note)
        return f"recorded {note}"

    return [lookup, keyed_record if os.environ.get("THINK_KEYED_RECORD") else record]


def _call_id(text: str, name: str) -> str:
    return f"{text.replace(' ', '_')}_{name}"


def expected_answer(text: str, results: dict[str, str]) -> str:
    """The final answer to ``text`` given what each tool returned (its output or error text)."""
    return f"Answer to {text}: lookup gave {results.get('lookup')}; record gave {results.get('record')}."


def stored_answer(text: str, results: dict[str, str]) -> str:
    """:func:`expected_answer` as ``redact`` lets it through (what every client and the store see)."""
    return expected_answer(text, results).replace("Answer to", REDACT["replacement"])


def script(request: ModelRequest) -> Step:
    """The model: it answers the latest user message it is shown, one tool per step."""
    messages = request.messages
    last = max(i for i, m in enumerate(messages) if isinstance(m, UserMessage))
    text = messages[last].content
    assert isinstance(text, str)
    results = {m.tool_name: str(m.output) for m in messages[last + 1 :] if isinstance(m, ToolMessage)}
    if "lookup" not in results:
        return Step(text=f"Looking up {text} first.", tool_calls=[call("lookup", {"key": text}, id=_call_id(text, "lookup"))],
                    usage=STEP_USAGE)
    if "record" not in results:
        return Step(text="Now recording it.", tool_calls=[call("record", {"note": text}, id=_call_id(text, "record"))],
                    usage=STEP_USAGE)
    return Step(text=expected_answer(text, results), usage=STEP_USAGE)


class CrashPoints:
    """The hook points of a turn where the worker may die, and a log of ``after_tool_call``."""

    name = "crash_points"

    def __init__(self, db: str) -> None:
        self.log = db + ".tools"

    @hookimpl
    def on_chunk(self, ctx: Any) -> None:
        if ctx.chunk.type == "text-delta":
            crash_point("streaming")

    @hookimpl
    def after_tool_call(self, ctx: Any) -> None:
        _append(self.log, json.dumps({"pid": os.getpid(), "call": ctx.tool_call_id, "tool": ctx.tool_name,
                                      "success": ctx.success, "interrupted": ctx.interrupted}))
        crash_point("tool_finished")

    @hookimpl
    def on_step_finish(self, ctx: Any) -> None:
        crash_point("step_finished")

    @hookimpl
    def on_chat_response(self, result: Any) -> None:
        crash_point("on_chat_response")


class CrashingStore(SQLiteStore):
    """Dies right after the answer and the completion are committed."""

    def store_submission_answer(self, *args: Any, **kwargs: Any) -> bool:
        stored = super().store_submission_answer(*args, **kwargs)
        if stored:
            crash_point("answer_stored")
        return stored


async def work(db: str, session_id: str, count: int, lease: float, via: str = "submit") -> None:
    model = ScriptedModel([script], repeat=True, delay=0.002)
    # fallback and budget loaded (limits never reached): their hooks run at every crash point.
    spare = ScriptedModel([script], repeat=True, delay=0.002, model_id="spare")
    plugins = [CrashPoints(db), Fallback({"models": [spare]}), Redact(REDACT),
               Budget({"turn_tokens": 10**6, "session_tokens": 10**9, "session_usd": 10**6,
                       "prices": {"scripted": {"input": 1.0, "output": 1.0}}})]
    agent = Think(model, tools=_tools(db), plugins=plugins, store=CrashingStore(db),
                  submission_lease=lease, load_entrypoints=False)
    session = agent.session(session_id)
    if via == "chat":
        for i in range(count):
            message = UIMessage(id=f"m{i}", role="user", parts=[{"type": "text", "text": f"message {i}"}])
            async for _ in session.stream_transcript(ClientTranscript(messages=[message]), trigger="http"):
                pass
            crash_point("after_finish")
        await agent.aclose()
        return
    accepted = [await session.submit_messages(f"message {i}", idempotency_key=f"m{i}") for i in range(count)]
    for row in accepted:
        await session.wait_for_submission(row.submission_id, timeout=300)
        crash_point("after_finish")
    await agent.aclose()


def _reply_results(reply: UIMessage) -> dict[str, str]:
    results = {}
    for part in reply.parts:
        if part.get("type", "").startswith("tool-"):
            name = part["type"][len("tool-"):]
            results[name] = str(part["output"]) if part.get("state") == "output-available" else part.get("errorText", "")
    return results


def _answers_by_message(messages: list[UIMessage], report: dict[str, Any]) -> dict[str, list[UIMessage]]:
    """The assistant messages after each user message (by its text); a user message stored
    twice, or an answer before any, is malformed."""
    answers: dict[str, list[UIMessage]] = {}
    current: str | None = None
    for message in messages:
        if message.role == "user":
            if message.text in answers:
                report["malformed"] += 1
                report["problems"].append(f"user message {message.text!r} stored twice")
            current = message.text
            answers[current] = []
        elif current is None:
            report["malformed"] += 1
        else:
            answers[current].append(message)
    return answers


def audit(db: str, session_id: str, count: int) -> dict[str, Any]:
    """What a drained database says: per message, one answer meaning what it should; each
    ``record`` effect at most once; every history well-formed."""
    report: dict[str, Any] = {"lost": 0, "answered_twice": 0, "wrong": 0, "reexecuted": 0, "malformed": 0,
                              "interrupted": 0, "problems": []}
    with SQLiteStore(db) as store:
        messages = store.list_messages(session_id)
        statuses = {s.messages[0].text: s for s in store.list_submissions(session_id)}
    answers = _answers_by_message(messages, report)
    for i in range(count):
        text = f"message {i}"
        replies = answers.get(text, [])
        row = statuses.get(text)
        if row is None or row.status != "completed" or not replies:
            report["lost"] += 1
            report["problems"].append(f"{text}: {row.status if row else 'not accepted'}, {len(replies)} answer(s)")
            continue
        if len(replies) > 1:
            report["answered_twice"] += 1
            report["problems"].append(f"{text}: {len(replies)} answers")
        reply = replies[-1]
        if reply.id != row.answer_message_id:
            report["wrong"] += 1
            report["problems"].append(f"{text}: stored answer {reply.id} is not the submission's {row.answer_message_id}")
        tool_parts = [p for p in reply.parts if p.get("type", "").startswith("tool-")]
        if any(p.get("state") not in SETTLED for p in tool_parts) or len(tool_parts) != 2:
            report["malformed"] += 1
            report["problems"].append(f"{text}: tool parts {tool_parts}")
        results = _reply_results(reply)
        report["interrupted"] += sum("interrupted" in r for r in results.values())
        texts = [p["text"] for p in reply.parts if p.get("type") == "text"]
        if not texts or texts[-1] != stored_answer(text, results):
            report["wrong"] += 1
            report["problems"].append(f"{text}: answered {texts[-1:]} with {results}")
        recorded = (reply.metadata or {}).get("usage")
        if recorded != {"scripted": (STEP_USAGE + STEP_USAGE + STEP_USAGE).model_dump()}:
            report["wrong"] += 1
            report["problems"].append(f"{text}: usage recorded {recorded}, three steps' expected")
    effects = Counter(Path(db + ".effects").read_text().splitlines()) if Path(db + ".effects").exists() else Counter()
    for line, n in effects.items():
        if line.startswith("record\t") and n > 1:
            report["reexecuted"] += n - 1
            report["problems"].append(f"{line!r} ran {n} times")
    report["effects"] = effects
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("session")
    parser.add_argument("messages", type=int)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--via", choices=("submit", "chat"), default="submit")
    args = parser.parse_args()
    asyncio.run(work(args.db, args.session, args.messages, args.lease, args.via))


if __name__ == "__main__":
    main()
