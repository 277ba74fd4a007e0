"""Answers to a session's pending tool calls given through its API (``add_tool_result``,
``approve_tool_call``): applied under the turn lock, then continued.

The read-modify-write of the answered message holds the session's turn lock, so it never
interleaves with a turn writing the same message (one still streaming, or one running approved
calls); from inside a turn of the session the lock is already ours, and the continuation runs
right after that turn. A settled call always gets its continuation, even when the caller is
cancelled between the write and the turn (a retry would be ignored as settled).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ..turn.pending_calls import Settle, apply_answer
from ..turn.request import TurnRequest
from ..types import TurnResult

if TYPE_CHECKING:
    from ..runner.turn_runner import TurnRunner
    from ..store import AsyncStore

__all__ = ["ToolAnswers"]

logger = logging.getLogger("think.session")

Spawn = Callable[[Coroutine[Any, Any, Any]], None]


class ToolAnswers:
    """Applies answers to the pending calls of one session and runs their continuations.

    :param spawn: runs a coroutine in the background, outside any turn's context.
    """

    def __init__(self, session_id: str, db: AsyncStore, runner: TurnRunner, spawn: Spawn) -> None:
        self._session_id = session_id
        self._db = db
        self._runner = runner
        self._spawn = spawn

    async def settle(
        self,
        tool_call_id: str,
        settle: Settle,
        auto_continue: bool,
        on_event: Callable[[dict[str, Any]], Any] | None,
        request_id: str | None,
        body: dict[str, Any] | None = None,
    ) -> TurnResult | None:
        """Apply ``settle`` to the call; when that left no call of its message waiting and
        ``auto_continue`` is set, run the continuation and return its result."""
        request = TurnRequest(
            "auto_continue", None, continuation=True, body=body, emit=on_event, request_id=request_id
        )
        if self._runner.in_turn():
            if await apply_answer(self._db, self._session_id, tool_call_id, settle) and auto_continue:
                # A continuation cannot run inside the current turn: it runs right after it.
                logger.info("tool result settled inside a turn of %s; the continuation runs after it", self._session_id)
                self._spawn(self._runner.run(request))
            return None
        applying = asyncio.ensure_future(self._apply_locked(tool_call_id, settle))
        try:
            found = await asyncio.shield(applying)
        except asyncio.CancelledError:
            if auto_continue:
                applying.add_done_callback(lambda done: self._continue_later(done, request))
            raise
        if found and auto_continue:
            return await self._runner.run(request)
        return None

    async def _apply_locked(self, tool_call_id: str, settle: Settle) -> bool:
        async with self._runner.lock:
            return await apply_answer(self._db, self._session_id, tool_call_id, settle)

    def _continue_later(self, applying: asyncio.Future[bool], request: TurnRequest) -> None:
        if applying.cancelled() or applying.exception() is not None or not applying.result():
            return
        self._spawn(self._runner.run(request))
