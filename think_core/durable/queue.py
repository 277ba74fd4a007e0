"""Durable submissions: ``submit_messages`` accepts into the store, a per-session drain runs
them through the normal turn, one after the other in acceptance order, and interrupted ones are
recovered when a process opens the session again.

The order is strict, across processes too: a submission whose owner died (or whose lease
expired) blocks the later ones of its session until it has been retaken and finished, so each
turn runs on the history its own message ends. A drain so blocked looks again every
:data:`OWNER_CHECK` seconds, so it retakes the submission as soon as the lease expires, or at
once when the owner was a process on this host that is gone.

The queue knows nothing of sessions: it is given the session id, the store, the lease, and the
two callables it needs — run a turn, cancel a turn."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast, get_args

from pydantic import ConfigDict

from ..errors import StoreUnavailable, UnknownSubmission
from ..messages import MessageInput, coerce_messages
from ..store import Submission
from ..turn.journal import TurnJournal
from ..turn.request import TurnRequest
from ..types import Trigger
from .crash_recovery import recover_orphaned_submissions, resume_own_submissions
from .intake import UNFINISHED, SubmissionIntake
from .lease import LeaseKeeper

if TYPE_CHECKING:
    from ..store import AsyncStore
    from ..types import TurnResult, UIMessage

logger = logging.getLogger("think.submissions")

_UNFINISHED = UNFINISHED

#: Seconds between two looks at a submission another owner runs (is the owner gone, did its
#: lease expire?) while a drain waits for it.
OWNER_CHECK = 0.5


_DONE = object()  # a listener's end of stream
_QUIET = object()  # put by a follower's _QuietTimer: nothing came for OWNER_CHECK seconds

#: Longest pause between two attempts of a drain waiting for its store to come back.
OUTAGE_PAUSE = 5.0
#: What a follower of a turn that a store outage stopped is told (the turn runs again later).
STORE_OUTAGE = "The database is unavailable. Your message is kept and will be answered once it is back."

#: Keys of a submission's ``metadata`` the drain reads: the entry path its turn reports as its
#: trigger (a server chat: ``http`` / ``websocket``) and the turn's ``body`` (the client's extra
#: data, e.g. ``{"read_only": true}``), kept so that a turn resumed after a crash has them too.
TRIGGER_KEY, BODY_KEY = "trigger", "body"



def _trigger_and_body(row: Submission) -> tuple[Trigger, dict[str, Any] | None]:
    metadata = row.metadata or {}
    trigger, body = metadata.get(TRIGGER_KEY), metadata.get(BODY_KEY)
    known: Trigger = cast(Trigger, trigger) if trigger in get_args(Trigger) else "submit"
    return known, (body if isinstance(body, dict) else None)


def _answered_message_id(row: Submission) -> str | None:
    """The message a submission's turn answers: its last user message (else its last one)."""
    users = [m.id for m in row.messages if m.role == "user"]
    return users[-1] if users else (row.messages[-1].id if row.messages else None)


class SubmitResult(Submission):
    """A submission as ``submit_messages`` returns it: ``accepted`` is ``False`` when the
    submission id or idempotency key named an existing submission."""

    model_config = ConfigDict(frozen=False)

    accepted: bool


class SubmissionQueue:
    """The durable queue of one session and its background drain."""

    def __init__(
        self,
        session_id: str,
        db: AsyncStore,
        *,
        lease: float,
        run_turn: Callable[[TurnRequest], Awaitable[TurnResult]],
        cancel: Callable[[str], bool],
    ) -> None:
        self.session_id = session_id
        self.db = db
        self.lease = lease
        self._run_turn = run_turn
        self._cancel = cancel
        self._drain_task: asyncio.Task[None] | None = None
        # Set (and replaced) when something of the session changed; made only when someone waits
        # for a change: an idle session (most open chats) holds none.
        self._changed: asyncio.Event | None = None
        # Who follows the turn of a submission live (a server chat's stream), by submission id.
        self._listeners: dict[str, list[asyncio.Queue[Any]]] = {}
        #: This process's submissions whose turn a store outage stopped: run again once it is back.
        self._interrupted: set[str] = set()
        self._kicks = 0

    async def recover(self, unfinished: bool | None = None) -> None:
        """Called once when the session opens in this process: drain if anything is unfinished
        (``unfinished``: as the opening read it; ``None``: read it now). Rows another live
        process is running (fresh heartbeat) are left to it; rows whose lease expired are
        retaken by the drain."""
        if unfinished is None:
            unfinished = bool(await self.db.list_submissions(self.session_id, status=_UNFINISHED, limit=1))
        if unfinished:
            self.kick()

    async def submit(
        self,
        messages: MessageInput,
        *,
        submission_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SubmitResult:
        # Shielded: once the row is written the drain must be started, even if the caller is
        # cancelled meanwhile, or an accepted submission would sit in the store unserved.
        return await asyncio.shield(
            self._accept(coerce_messages(messages), submission_id, idempotency_key, metadata)
        )

    async def _accept(
        self,
        messages: list[UIMessage],
        submission_id: str | None,
        idempotency_key: str | None,
        metadata: dict[str, Any] | None,
    ) -> SubmitResult:
        row, created = await self.db.create_submission(
            self.session_id,
            messages,
            submission_id=submission_id,
            idempotency_key=idempotency_key,
            metadata=metadata,
        )
        if row.status == "pending":
            self.kick()
        return SubmitResult(**row.model_dump(), accepted=created)

    def kick(self) -> None:
        """Make sure a drain is running. It runs in a fresh context: a submission accepted
        from inside a turn must not look like a nested call to the drain."""
        self._kicks += 1  # a drain running now looks again before it ends
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = asyncio.get_running_loop().create_task(
                self._drain(), name=f"think-drain-{self.session_id}", context=contextvars.Context()
            )

    async def _drain(self) -> None:
        """Until nothing of the session is unfinished: claim the next submission in order, or
        (when an earlier one is still running) retake what a dead or expired owner left. While
        an earlier one runs elsewhere, look again every :data:`OWNER_CHECK` seconds. While the
        store is unavailable (past the store's own retries), wait and try again: nothing
        accepted is dropped."""
        pause = OWNER_CHECK
        while True:
            try:
                if not await self._drain_once():
                    return
                pause = OWNER_CHECK
            except StoreUnavailable as exc:
                logger.warning("the drain of session %s waits for the store: %s", self.session_id, exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, OUTAGE_PAUSE)

    async def _drain_once(self) -> bool:
        """Run what is due; ``False`` once nothing of the session is unfinished."""
        session_id = self.session_id
        while True:
            if self._interrupted:
                resumed = await self.db.run(resume_own_submissions, session_id, list(self._interrupted))
                self._interrupted.clear()
                for row in resumed:
                    await self._run(row, recovering=True)
            # Claim first: a submission accepted here needs no sweep for orphans before it. One
            # an orphan holds up (an earlier row still `running`) is not claimed (in order), and
            # the sweep below retakes the orphan.
            claimed = await self.db.claim_next_submission(session_id, in_order=True, lease=self.lease)
            if claimed is not None:
                kicks = self._kicks
                unfinished = await self._run(claimed, recovering=False)
                # Usually nothing else is unfinished: the answer's transaction said so (or one
                # read does), instead of a sweep for orphans and a claim that both find nothing.
                # A submission accepted here since is run: its kick found this drain running.
                if unfinished is None:
                    unfinished = bool(await self.db.list_submissions(session_id, status=_UNFINISHED, limit=1))
                if not unfinished and kicks == self._kicks:
                    return False
                continue
            recovered = await self.db.run(recover_orphaned_submissions, session_id, lease=self.lease)
            for retaken in recovered:
                await self._run(retaken, recovering=True)
            if recovered:
                continue
            kicks = self._kicks
            if not await self.db.list_submissions(session_id, status=_UNFINISHED, limit=1) and kicks == self._kicks:
                return False
            try:
                await asyncio.wait_for(self._change().wait(), min(self.lease / 3, OWNER_CHECK))
            except TimeoutError:
                pass

    async def drained(self) -> None:
        """Wait until the drain running now (if any) has nothing left to do."""
        task = self._drain_task
        if task is not None and not task.done():
            await asyncio.shield(task)

    async def _run(self, row: Submission, *, recovering: bool) -> bool | None:
        """Run ``row``'s turn; whether anything of the session was unfinished after its answer
        was stored (``None``: not known)."""
        db, sid, session_id = self.db, row.submission_id, self.session_id
        intake = SubmissionIntake(db, row, recovering=recovering)
        trigger, body = _trigger_and_body(row)
        request = TurnRequest(
            trigger,
            None,
            continuation=intake.answers is not None,  # it continues the answered message
            body=body,
            emit=functools.partial(self._emit, sid),
            request_id=sid,
            intake=intake,
            answers=_answered_message_id(row),
            journal=TurnJournal(db, session_id, sid, entries=row.progress),
            resumable=True,  # a page can follow it, after a restart too
        )
        if recovering:  # a fresh claim took the lease with the row; a retaken row renews it now
            await db.heartbeat_submission(session_id, sid)
        lease = LeaseKeeper(self.db.sync, session_id, sid, interval=self.lease / 3, on_lost=lambda: self._cancel(sid))
        lease.start()
        try:
            result = await self._run_turn(request)
            # A turn that stored its answer finished the row with it (or learnt it is not ours):
            # the rest ended without storing one (skipped, or failed before running).
            if not intake.answered:
                status, error = (result.status, result.error) if result.status != "skipped" else (
                    "aborted", "cancelled before it ran"
                )
                await db.finish_submission(session_id, sid, status, error=error)
        except asyncio.CancelledError:
            raise
        except StoreUnavailable as exc:
            # Not the turn's failure: the row stays ours and running, and runs again (from its
            # journal) once the store is back. Followers are told now, not left with a bare end.
            logger.warning("submission %s of session %s stopped: the store is unavailable (%s)", sid, session_id, exc)
            self._interrupted.add(sid)
            for listener in self._listeners.get(sid, ()):
                listener.put_nowait({"type": "error", "errorText": STORE_OUTAGE})
            raise
        except Exception as exc:  # an accepted submission is never dropped silently
            logger.exception("submission %s failed", sid)
            if not intake.answered:
                await db.finish_submission(session_id, sid, "error", error=f"{type(exc).__name__}: {exc}")
        finally:
            lease.stop()
            for listener in self._listeners.get(sid, ()):
                listener.put_nowait(_DONE)
        self._notify()
        return intake.unfinished_after

    # -- following a submission's turn live ---------------------------------------------------
    def listen(self, submission_id: str) -> asyncio.Queue[Any]:
        """A queue that receives the chunks of ``submission_id``'s turn when this process runs
        it (see :meth:`follow`); :meth:`unlisten` when done."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._listeners.setdefault(submission_id, []).append(queue)
        return queue

    def unlisten(self, submission_id: str, queue: asyncio.Queue[Any]) -> None:
        queues = self._listeners.get(submission_id, [])
        if queue in queues:
            queues.remove(queue)
        if not queues:
            self._listeners.pop(submission_id, None)

    def _emit(self, submission_id: str, chunk: dict[str, Any]) -> None:
        for queue in self._listeners.get(submission_id, ()):
            queue.put_nowait(chunk)

    async def follow(self, submission_id: str, queue: asyncio.Queue[Any]) -> AsyncGenerator[dict[str, Any], None]:
        """Yield the chunks ``queue`` (from :meth:`listen`) receives until the submission's
        turn ends here, or until the submission is final (another process ran it, or it had
        finished already): then nothing more comes, and the caller may replay the answer. After
        :data:`OWNER_CHECK` seconds without a chunk, the submission's row is looked at."""
        quiet = _QuietTimer(queue)
        try:
            while True:
                item = queue.get_nowait() if not queue.empty() else await queue.get()
                if item is _QUIET:
                    try:
                        row = await self.db.get_submission(self.session_id, submission_id)
                    except StoreUnavailable:
                        # The follower is told and let go; the turn is answered once the store is back.
                        yield {"type": "error", "errorText": STORE_OUTAGE}
                        return
                    if row is not None and row.status in _UNFINISHED:
                        quiet.rearm()
                        continue
                    while not queue.empty():  # what was emitted meanwhile
                        item = queue.get_nowait()
                        if item is not _DONE and item is not _QUIET:
                            yield item
                    return
                if item is _DONE:
                    return
                quiet.heard()
                yield item
        finally:
            quiet.cancel()

    def _change(self) -> asyncio.Event:
        """The event the next change sets."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def cancel(self, submission_id: str) -> bool:
        """Cancel a pending or running submission; its status becomes ``aborted``. A pending
        one's messages are never appended."""
        row = await self.db.get_submission(self.session_id, submission_id)
        if row is None or row.status not in ("pending", "running"):
            return False
        if row.status == "running" and self._cancel(submission_id):
            return True  # the drain records the aborted turn
        changed = await self.db.finish_submission(self.session_id, submission_id, "aborted", error="cancelled")
        self._notify()
        return changed

    async def skip_pending(self, reason: str) -> int:
        """Mark every pending submission ``skipped`` (it never runs); returns how many."""
        skipped = 0
        for row in await self.db.list_submissions(self.session_id, status="pending"):
            skipped += bool(await self.db.finish_submission(self.session_id, row.submission_id, "skipped", error=reason))
        self._notify()
        return skipped

    async def wait(self, submission_id: str, timeout: float | None = None) -> Submission:
        """Wait until a submission reaches a final status and return it."""

        async def until_final() -> Submission:
            while True:
                row = await self.db.get_submission(self.session_id, submission_id)
                if row is None:
                    raise UnknownSubmission(submission_id, self.session_id)
                if row.status not in ("pending", "running"):
                    return row
                # Our own drain signals; a submission another process runs is polled.
                try:
                    await asyncio.wait_for(self._change().wait(), min(self.lease / 3, OWNER_CHECK))
                except TimeoutError:
                    pass

        return await asyncio.wait_for(until_final(), timeout)

    async def aclose(self) -> None:
        task = self._drain_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class _QuietTimer:
    """Puts :data:`_QUIET` into a follower's queue once :data:`OWNER_CHECK` seconds passed
    without a chunk. One timer per quiet spell, not one per chunk: a live stream's follower
    notes each chunk's time (:meth:`heard`), and the timer, when it fires early, waits out the
    rest of the spell. (A timeout around each ``queue.get()`` costs a timer handle and a
    cancellation per streamed event.)"""

    __slots__ = ("_queue", "_loop", "_last", "_handle")

    def __init__(self, queue: asyncio.Queue[Any]) -> None:
        self._queue = queue
        self._loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = None
        self.rearm()

    def heard(self) -> None:
        self._last = self._loop.time()

    def rearm(self) -> None:
        """(At the start, and after a look at the row.) The next look comes OWNER_CHECK seconds
        from now, unless a chunk comes first."""
        self._last = self._loop.time()
        self._handle = self._loop.call_at(self._last + OWNER_CHECK, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        now = self._loop.time()
        if not self._queue.empty():  # chunks wait for the follower: not quiet
            self._handle = self._loop.call_at(now + OWNER_CHECK, self._fire)
            return
        due = self._last + OWNER_CHECK
        if now + 0.001 < due:  # a chunk came meanwhile: wait out the rest of the spell
            self._handle = self._loop.call_at(due, self._fire)
            return
        self._handle = None  # one _QUIET at a time: the follower re-arms once it has looked
        self._queue.put_nowait(_QUIET)
