"""The failure policy around a turn.

A turn that fails is classified (``classify_chat_error``, unless the step retry already asked).
A ``"context_overflow"`` with reactive recovery on is compacted and the turn re-run — bounded by
``context_overflow.max_retries`` and only while compaction actually shrinks the history; the
failed attempt's partial answer is discarded. Anything else is terminal: ``on_chat_error`` may
replace the error, and the turn ends with status ``error``. Between turns, a session with
``compact_after`` compacts once its history passes the threshold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ProviderError, StoreUnavailable
from ..events import Usage
from ..models.base import ModelMessage
from ..models.retry import is_retryable
from ..turn.compaction import CompactionResult, TokenCounter, estimate_tokens
from ..turn.loop import HistoryLoader, Turn, TurnDeps
from ..turn.request import TurnFailed, TurnOutcome, TurnRequest
from ..turn.ui_stream import AssistantMessageBuilder
from ..types import ChatErrorContext, ErrorStage, UIMessage

if TYPE_CHECKING:
    from ..hooks.dispatch import HookDispatcher

logger = logging.getLogger("think.recovery")
#: One WARNING per failed turn: what a server operator sees without ``-v`` (``think serve``).
failures = logging.getLogger("think.failures")
#: One machine-readable record per failed turn (``extra["event"] == "chat:request:failed"``), the
#: counterpart of Think's ``chat:request:failed`` diagnostics event: INFO, so that it is quiet
#: unless an application routes ``think.events`` somewhere.
events = logging.getLogger("think.events")


SavePartial = Callable[[], Awaitable[Any]]


@dataclass
class TurnMemory:
    """What a session carries from one turn to the next for context management."""

    last_input_tokens: int = 0  # input tokens of the latest step, for the proactive guard
    compactions: list[CompactionResult] = field(default_factory=list)
    compact_after: tuple[int, TokenCounter | None] | None = None


class TurnRecovery:
    """Runs turns of one session under the failure policy. Called by the runner, under the lock."""

    def __init__(self, session: Any, deps: TurnDeps, memory: TurnMemory) -> None:
        self.session = session
        self.deps = deps
        self.memory = memory

    @property
    def hooks(self) -> HookDispatcher:
        return self.deps.hooks

    async def run_with_overflow_recovery(
        self,
        request: TurnRequest,
        request_id: str,
        body: dict[str, Any] | None,
        builder: AssistantMessageBuilder,
        save_partial: SavePartial | None = None,
    ) -> TurnOutcome:
        """Run the turn; on a context overflow, compact and re-run it (bounded)."""
        overflow = self.deps.context_overflow
        continuation = request.continuation
        attempts = 0
        while True:
            history, reload_history, approvals = await self._turn_inputs(builder, continuation, request.answers)
            turn = Turn(
                self.deps,
                self.session,
                request_id=request_id,
                trigger=request.trigger,
                continuation=continuation,
                body=body,
                builder=builder,
                history=history,
                reload_history=reload_history,
                approvals=approvals,
                last_input_tokens=self.memory.last_input_tokens,
                journal=request.journal,
                config=request.config,
            )
            try:
                outcome = await self._attempt(turn, request_id)
            except TurnFailed as failure:
                await self._classify(failure, request_id, body)
                if failure.classification == "context_overflow" and overflow.reactive and attempts < overflow.max_retries:
                    attempts += 1
                    compaction = await self.compact_quietly("reactive")
                    if compaction is not None and compaction.shortened:
                        builder.reset()  # the partial of the failed attempt is discarded, never persisted
                        if continuation:  # re-run as a turn of its own: the message it continued stays
                            builder.renumber()
                        await request.journal.reset()
                        builder.data("think-compaction", {"reason": "reactive", "attempt": attempts})
                        continuation = False
                        continue
                return await self.fail(
                    failure, request_id, builder, persisted=True, usage=turn.usage, body=body, save_partial=save_partial
                )
            finally:
                self._remember(turn)
            builder.finish()
            return outcome

    async def _turn_inputs(
        self, builder: AssistantMessageBuilder, continuation: bool, answers: str | None
    ) -> tuple[list[ModelMessage], HistoryLoader, UIMessage | None]:
        """What a turn starts from: the history the model sees (up to the message it answers),
        how to read it again, and — for a continuation — the message it continues, whose
        approved calls run in its first step (the answer goes on in it)."""
        db, session_id = self.deps.db, self.session.id
        last: UIMessage | None = None
        if continuation:
            last = next((m for m in reversed(await db.list_messages(session_id)) if m.role == "assistant"), None)
            if last is not None and last.id == builder.message_id:
                # The stored answer is the one before this turn (a crashed continuation's journal
                # replay brings its own parts; the store still holds the answer it continues).
                builder.continues(len(last.parts))
                if not builder.parts:
                    builder.restore(last.id, last.parts, last.metadata)

        async def load_history() -> list[ModelMessage]:
            # Kept as model messages between turns: a turn reads only what changed since the last.
            return await db.model_history.model_messages(session_id, answers)

        return await load_history(), load_history, last

    async def _attempt(self, turn: Turn, request_id: str) -> TurnOutcome:
        try:
            return await turn.run()
        except (TurnFailed, asyncio.CancelledError, StoreUnavailable):
            raise  # a store outage is not the turn's failure: a durable turn runs again after it
        except Exception as exc:  # a bug must still end the turn by the failure policy
            logger.exception("turn %s raised unexpectedly", request_id)
            raise TurnFailed(exc, "turn") from exc

    def _remember(self, turn: Turn) -> None:
        self.memory.last_input_tokens = turn.last_input_tokens
        self.memory.compactions.extend(c for c in turn.compactions if c.compaction_id is not None)

    def error_context(
        self, turn_body: dict[str, Any] | None, request_id: str, stage: ErrorStage, persisted: bool
    ) -> ChatErrorContext:
        return ChatErrorContext(
            session=self.session, request_id=request_id, stage=stage, messages_persisted=persisted, body=turn_body
        )

    async def _classify(
        self, failure: TurnFailed, request_id: str, body: dict[str, Any] | None, persisted: bool = True
    ) -> None:
        if not failure.classified:
            failure.classification = await self.hooks.classify_chat_error(
                failure.error, self.error_context(body, request_id, failure.stage, persisted)
            )
            failure.classified = True

    async def fail(
        self,
        failure: TurnFailed,
        request_id: str,
        builder: AssistantMessageBuilder,
        *,
        persisted: bool,
        usage: Usage | None = None,
        body: dict[str, Any] | None = None,
        save_partial: SavePartial | None = None,
    ) -> TurnOutcome:
        """End the turn as ``error``: ``on_chat_error`` may replace the error or its message.

        ``save_partial`` stores what the turn produced so far (with the error as it stands)
        before ``on_chat_error`` runs, so a plugin reading the session there sees the answer the
        user saw; the runner stores it again afterwards with the error text the hook settled on."""
        await self._classify(failure, request_id, body, persisted)
        if save_partial is not None:
            builder.note_error(str(failure.error) or type(failure.error).__name__)
            await save_partial()
        error_text = await self._report(failure, request_id, body, persisted)
        builder.error(error_text)
        return TurnOutcome("error", error_text=error_text, usage=usage if usage is not None else Usage())

    async def report_unparsed(self, error: BaseException, request_id: str, body: dict[str, Any] | None = None) -> str:
        """A chat request that could not be parsed (no turn exists): classified, handed to
        ``on_chat_error`` with ``stage="parse"`` and recorded; returns the error text to send."""
        failure = TurnFailed(error, "parse")
        await self._classify(failure, request_id, body, persisted=False)
        return await self._report(failure, request_id, body, persisted=False)

    async def _report(
        self, failure: TurnFailed, request_id: str, body: dict[str, Any] | None, persisted: bool
    ) -> str:
        """``on_chat_error`` (its answer may replace the error) and the ``chat:request:failed`` record."""
        ctx = self.error_context(body, request_id, failure.stage, persisted)
        ctx.classification = failure.classification
        replacement = await self.hooks.on_chat_error(failure.error, ctx)
        error = replacement if isinstance(replacement, BaseException) else failure.error
        error_text = replacement if isinstance(replacement, str) else (str(error) or type(error).__name__)
        # WARNING: the one line a server operator sees per failed turn (without -v), naming what
        # to look up (session, request) and why it failed (classification, the provider's words).
        failures.warning(
            "turn failed: session %s request %s (%s, stage %s): %s",
            self.session.id, request_id, shown_classification(failure), failure.stage, error_text,
        )
        events.info(
            "chat:request:failed",
            extra={
                "event": "chat:request:failed",
                "stage": failure.stage,
                "classification": failure.classification,
                "request_id": request_id,
                "session_id": self.session.id,
                "persisted": persisted,
            },
        )
        return error_text

    # -- compaction between and around turns ------------------------------------------------------
    async def compact(self, reason: str, token_counter: TokenCounter | None = None) -> CompactionResult:
        result = await self.deps.compactor.compact(self.session.id, reason=reason, token_counter=token_counter)
        if result.compaction_id is not None:  # only compactions that wrote an overlay are recorded
            self.memory.compactions.append(result)
        return result

    async def compact_quietly(self, reason: str, token_counter: TokenCounter | None = None) -> CompactionResult | None:
        """Compact; a failure is logged and the turn goes on as if nothing was compacted."""
        try:
            return await self.compact(reason, token_counter)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("compaction (%s) of session %s failed", reason, self.session.id, exc_info=True)
            return None

    async def compact_between_turns(self) -> None:
        if self.memory.compact_after is None:
            return
        threshold, counter = self.memory.compact_after
        count = counter or estimate_tokens
        if count(await self.deps.db.history(self.session.id)) > threshold:
            await self.compact_quietly("compact_after", counter)


def shown_classification(failure: TurnFailed) -> str:
    """The classification a plugin gave the failure; without one, what the retry policy makes of
    the error (``rate_limit``, ``transient`` or ``fatal``), so that an operator's log line still
    says whether waiting could help."""
    if failure.classification:
        return failure.classification
    error = failure.error
    if isinstance(error, ProviderError) and error.status == 429:
        return "rate_limit"
    return "transient" if is_retryable(error) else "fatal"

