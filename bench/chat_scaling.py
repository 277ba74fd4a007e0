"""Does a chat request cost more when the conversation is longer?

A session is seeded with N prior messages (user / assistant pairs) and N prior finished
submissions (a server chat is one submission per message), then takes R chat requests through
``Session.stream_transcript`` — what ``think serve`` calls for a ``POST /api/chat`` or a
``cf_agent_use_chat_request``: a new user message, accepted as a durable submission, answered by
a one-step scripted model that ignores what it is given (its usage is scripted too, so it does
not even measure its input). The store is a SQLite file (or
PostgreSQL with ``--postgres URL``) wrapped in a counting proxy: every call of a ``Store``
method is counted, with its time.

Each request is timed at three points from the moment it is handed to the session:

  accept   the submission is accepted (``create_submission`` returned): working out what the
           request means from the stored history and the submissions, and storing it — the
           part of a request that is the engine's own bookkeeping
  model    the turn's first ``before_step`` (the model is about to be called): accept, plus
           the drain claiming the submission, appending the message and assembling the model's
           input (the whole history, as model messages: kept between turns, see
           ``think_core/store/history_cache.py``)
  whole    the stream's end and the drain idle: the model's (scripted) answer stored too

and, within ``to model``, the time the request spends on the model's input: reading what
changed in the session's history (``Store.history_changes``; ``Store.history`` when something
reads it whole) and turning it into model messages (``to_model_messages``, timed by wrapping it
where the history cache calls it); ``whole − input`` is the rest of the request.

The sizes take their requests in turns (one request of each size per round, the first round a
warm-up), so a slow spell of a shared machine hits them alike; ``× paired`` is the median over
the rounds of a request's whole time against the first size's request of the same round.

``--transcript last`` sends only the new user message (a client that sends the last message
only, as AI SDK's ``prepareSendMessagesRequest`` can); ``full`` sends the whole transcript
(``useChat``'s default), so the request itself grows with the conversation.

    python bench/chat_scaling.py                          # N = 10, 1,000, 10,000
    python bench/chat_scaling.py --sizes 10,10000 --repeat 15 --transcript full
    python bench/chat_scaling.py --postgres postgresql://postgres@127.0.0.1:5432/think_bench
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import tempfile
import time
from typing import Any

from _common import machine, median, table
from _counting import CountingStore

from think_core import ScriptedModel, Step, Think, Usage, hookimpl
from think_core.chat.transcript import ClientTranscript
from think_core.store import Store, history_cache
from think_core.store.aio import open_store
from think_core.types import UIMessage

SESSION = "long-chat"


class StepClock:
    """Notes when the first step of a turn is about to call the model."""

    def __init__(self) -> None:
        self.first_step: float | None = None

    @hookimpl
    def before_step(self, ctx: Any) -> None:
        if self.first_step is None:
            self.first_step = time.perf_counter()


def seed(store: Store, n: int) -> list[UIMessage]:
    """N messages (user / assistant pairs) and N finished submissions in the session."""
    store.ensure_session(SESSION)
    messages = [
        UIMessage(id=f"m{i}", role="user" if i % 2 == 0 else "assistant",
                  parts=[{"type": "text", "text": f"message {i} " + "lorem ipsum " * 8}])
        for i in range(n)
    ]
    store.append_messages(SESSION, messages)
    for i in range(n):
        row, _ = store.create_submission(SESSION, [messages[i - i % 2]], idempotency_key=f"seed-{i}")
        store.finish_submission(SESSION, row.submission_id, "completed")
    return messages


_CONVERT = history_cache.to_model_messages


def time_conversion(countings: list[CountingStore]) -> None:
    """Count the time the turn spends turning the history into model messages (in the
    ``spent`` of the store recording: one at a time)."""
    def timed(history: Any) -> Any:
        start = time.perf_counter()
        try:
            return _CONVERT(history)
        finally:
            for counting in countings:
                if counting.recording:
                    counting.spent["to_model_messages"] += time.perf_counter() - start

    history_cache.to_model_messages = timed


async def one_request(
    agent: Think, counting: CountingStore, clock: StepClock, transcript: list[UIMessage]
) -> dict[str, Any]:
    session = agent.session(SESSION)
    clock.first_step = None
    counting.clear()
    gc.collect()
    counting.recording = True
    start = time.perf_counter()
    async for _chunk in session.stream_transcript(ClientTranscript(messages=transcript), trigger="http"):
        pass
    await session.submissions_drained()
    end = time.perf_counter()
    counting.recording = False
    accepted = counting.returned.get("create_submission")
    calls, _ = counting.request_calls()  # without the orphan watch's sweeps
    return {
        "accept": (accepted - start) * 1000 if accepted is not None else float("nan"),
        "model": ((clock.first_step or end) - start) * 1000,
        "whole": (end - start) * 1000,
        "input": sum(counting.spent[k] for k in ("history", "history_changes", "to_model_messages")) * 1000,
        "calls": calls,
    }


class SizeRun:
    """One size's session (its own store and agent), taking one request at a time, so that the
    sizes can take their requests in turns: a slow spell of the shared machine then hits every
    size alike, and the ratio of each round's requests is compared, not whole runs."""

    def __init__(self, n: int, store: Store, mode: str, resend: bool) -> None:
        self.n, self.store, self.mode, self.resend = n, store, mode, resend
        self.history = seed(store, n)
        self.counting = CountingStore(store)
        self.clock = StepClock()
        self.results: list[dict[str, Any]] = []

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        # A model that does not look at what it is sent (a usage of its own: no estimate from the input).
        model = ScriptedModel([Step(text="ok", usage=Usage(input_tokens=1, output_tokens=1, total_tokens=2))], repeat=True)
        self.agent = await stack.enter_async_context(
            Think(model, store=self.counting, plugins=[self.clock], load_entrypoints=False)
        )
        await self.agent.session(SESSION).open()

    async def request(self, r: int) -> None:
        """Request ``r`` (the first is a warm-up, not kept)."""
        message = UIMessage(id=f"new-{r}", role="user", parts=[{"type": "text", "text": f"question {r}"}])
        transcript = [*self.history, message] if self.mode == "full" else [message]
        result = await one_request(self.agent, self.counting, self.clock, transcript)
        if self.resend:  # the same message sent again (a retry, a reload): its answer replayed
            result = await one_request(self.agent, self.counting, self.clock, transcript)
        if r:
            self.results.append(result)
        if self.mode == "full":
            self.history = self.store.list_messages(SESSION)

    def summary(self, base: SizeRun) -> dict[str, Any]:
        results = self.results
        counting_keys = sorted({k for res in results for k in res["calls"]})
        per_request = {k: sorted({res["calls"].get(k, 0) for res in results}) for k in counting_keys}
        return {
            "n": self.n,
            "accept": median([r["accept"] for r in results]),
            "model": median([r["model"] for r in results]),
            "whole": median([r["whole"] for r in results]),
            # Each round's request against the base size's in the same round, the median of those.
            "paired": median([r["whole"] / b["whole"] for r, b in zip(results, base.results, strict=True)]),
            "input": median([r["input"] for r in results]),
            "rest": median([r["whole"] - r["input"] for r in results]),
            "calls": sorted({sum(r["calls"].values()) for r in results}),
            "by_method": per_request,
        }


async def run_sizes(sizes: list[int], repeat: int, mode: str, resend: bool, spec: str | None, tmp: str) -> list[dict[str, Any]]:
    schemas = {n: f"bench_chat_{n}_{os.getpid()}" for n in sizes}  # on PostgreSQL a fresh schema per size
    with contextlib.ExitStack() as closing:
        runs = []
        for n in sizes:
            store = postgres_store(spec, schemas[n]) if spec else open_store(os.path.join(tmp, f"chat-{n}.db"))
            closing.callback(store.close)
            if spec:
                closing.callback(drop_schema, spec, schemas[n])
            runs.append(SizeRun(n, store, mode, resend))
        time_conversion([run.counting for run in runs])
        async with contextlib.AsyncExitStack() as stack:
            for run in runs:
                await run.open(stack)
            for r in range(repeat + 1):
                for run in runs:
                    await run.request(r)
        return [run.summary(runs[0]) for run in runs]


def postgres_store(url: str, schema: str) -> Store:
    from think_core.store.postgres import PostgresStore

    return PostgresStore(url, schema=schema)


def drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _calls(values: list[int]) -> str:
    return "/".join(str(v) for v in values)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,1000,10000", help="prior messages / submissions (comma-separated)")
    parser.add_argument("--repeat", type=int, default=9, help="timed requests per size (median)")
    parser.add_argument("--transcript", choices=("last", "full"), default="last")
    parser.add_argument("--resend", action="store_true",
                        help="time each message sent a second time (answered already) instead of the first")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL instead of a SQLite file")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"# chat_scaling: transcript={args.transcript}{', resent' if args.resend else ''}, {args.repeat} requests per size, "
          f"store={'postgresql' if args.postgres else 'sqlite file'}")
    print(f"# {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = await run_sizes(sizes, args.repeat, args.transcript, args.resend, args.postgres, tmp)
    base = rows[0]
    print(table(
        ["prior msgs/subs", "accept ms", "×", "to model ms", "×", "whole ms", "×", "× paired", "model input ms",
         "whole − input ms", "×", "store calls"],
        [[r["n"], r["accept"], r["accept"] / base["accept"], r["model"], r["model"] / base["model"],
          r["whole"], r["whole"] / base["whole"], r["paired"], r["input"], r["rest"], r["rest"] / base["rest"],
          _calls(r["calls"])]
         for r in rows],
    ))
    methods = sorted({m for r in rows for m in r["by_method"]})
    print()
    print(table(["store method", *(f"N={r['n']:,}" for r in rows)],
                [[m, *(_calls(r["by_method"].get(m, [0])) for r in rows)] for m in methods]))


if __name__ == "__main__":
    asyncio.run(main())
