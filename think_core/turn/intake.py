"""How a turn's input arrives, and where its answer goes.

Every :class:`~think_core.turn.request.TurnRequest` has an :class:`Intake`; the runner calls it
under the session's turn lock, in this order: :meth:`~Intake.admit` (may the turn run, and what
it is), :meth:`~Intake.write` (the turn's input into the history), then — once the turn is over —
:meth:`~Intake.store_answer`. Three kinds:

* :class:`MessagesIntake` — the messages an entry path was given (``chat``, ``stream``,
  ``save_messages``, a continuation), appended as they are; the answer is upserted.
* ``TranscriptIntake`` (:mod:`think_core.chat.transcript`) — a chat client's whole transcript, applied to the stored history
  when the turn is admitted (see :mod:`think_core.chat.transcript`): what it cuts, appends and
  answers is worked out then, under the lock.
* ``SubmissionIntake`` (:mod:`think_core.durable.queue`) — a durable submission: admitted only
  while it is still running here, its messages applied from the store, its answer stored with
  its completion in one transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..messages import coerce_messages
from ..types import Trigger, UIMessage

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["HistoryStore", "Intake", "MessagesIntake", "StoreWrite", "TurnRequestFields"]

#: A write the turn held back to be made with its answer (its stream's end), called with the
#: store inside the transaction that stores the answer.
StoreWrite = Callable[["Store"], None]


class HistoryStore(Protocol):
    """The part of the session's store an intake uses."""

    async def list_messages(self, session_id: str) -> list[UIMessage]: ...

    async def upsert_message(self, session_id: str, message: UIMessage) -> None: ...

    async def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> int: ...

    async def append_messages(self, session_id: str, messages: Sequence[UIMessage]) -> list[UIMessage]: ...

    async def write_turn_input(self, session_id: str, write: Callable[[Store], object]) -> None:
        """``write(store)`` in one transaction with the read of the history the turn will send
        (see :meth:`~think_core.store.aio.AsyncStore.write_turn_input`)."""
        ...


class TurnRequestFields(Protocol):
    """The fields of a turn request an intake reads, and may settle when it admits the turn."""

    trigger: Trigger
    incoming: Any
    continuation: bool
    body: dict[str, Any] | None
    message_ids: list[str] | None


class Intake(Protocol):
    """Where a turn's input comes from and where its answer goes (called under the turn lock)."""

    async def admit(self, db: HistoryStore, session_id: str, request: TurnRequestFields) -> bool:
        """Before anything else: whether the turn runs (``False``: it is skipped). May settle
        what the turn is (its trigger, its incoming messages)."""
        ...

    async def write(
        self, db: HistoryStore, session_id: str, request: TurnRequestFields, opening: Sequence[StoreWrite] = ()
    ) -> None:
        """Write the turn's input into the history. ``opening``: writes that belong with it
        (the turn's stream opened), for an intake that writes in a transaction to make in it
        (one that does not leaves them: they are made afterwards)."""
        ...

    async def store_answer(
        self, db: HistoryStore, session_id: str, message: UIMessage | None, status: str, error: str | None,
        closing: Sequence[StoreWrite] = (),
    ) -> bool:
        """Store the turn's answer (``None``: it has none) with the turn's final ``status``;
        ``False`` when the store refused it (the turn is not its submission's any more).
        ``closing``: writes that belong with the answer, for an intake that stores it in a
        transaction to make in it (one that does not leaves them: they are made afterwards)."""
        ...


class MessagesIntake:
    """The messages of ``request.incoming`` (a list, or a function of the stored history
    resolved now), appended as they are; the answer upserted."""

    async def admit(self, db: HistoryStore, session_id: str, request: TurnRequestFields) -> bool:
        return True

    async def write(
        self, db: HistoryStore, session_id: str, request: TurnRequestFields, opening: Sequence[StoreWrite] = ()
    ) -> None:
        incoming = request.incoming
        if callable(incoming):
            incoming = incoming(await db.list_messages(session_id))
            if asyncio.iscoroutine(incoming):
                incoming = await incoming
            incoming = coerce_messages(incoming)
        messages: list[UIMessage] = incoming or []

        def write(store: Store) -> None:
            for also in opening:
                also(store)
            if messages:
                store.append_messages(session_id, messages)

        await db.write_turn_input(session_id, write)

    async def store_answer(
        self, db: HistoryStore, session_id: str, message: UIMessage | None, status: str, error: str | None,
        closing: Sequence[StoreWrite] = (),
    ) -> bool:
        if message is not None:
            await db.upsert_message(session_id, message)
        return True
