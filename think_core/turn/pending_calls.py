"""Answers to pending tool calls: a client tool's result, a human's approval or denial.

A pending call is a tool part of an assistant message in state ``input-available`` (a client
tool) or ``approval-requested`` (a ``needs_approval`` tool). Answering it updates that part in
place; when no call of the message is left waiting, the session runs an auto-continuation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UnknownToolCall
from ..messages import PENDING_TOOL_STATES, is_tool_part

Settle = Callable[[dict[str, Any]], bool]
"""Updates a pending part; ``False`` when the answer was already given (ignored), ValueError
when this kind of answer does not fit the call."""

WAITING_STATES = ("input-available", "approval-requested")


def result_update(tool_call_id: str, output: Any, error: str | None) -> Settle:
    """A client tool's result (or error) for the call."""

    def settle(part: dict[str, Any]) -> bool:
        if part.get("state") == "approval-responded":
            raise ValueError(
                f"tool call {tool_call_id!r} was approved and runs on the server; it takes no client result"
            )
        if error is not None:
            part.update(state="output-error", errorText=error)
        else:
            part.update(state="output-available", output=output)
        part.pop("preliminary", None)
        return True

    return settle


def approval_update(tool_call_id: str, approved: bool, reason: str | None) -> Settle:
    """A human's answer to an approval request: approved calls run in the continuation, a
    denied one is answered with an error the model can read."""

    def settle(part: dict[str, Any]) -> bool:
        if part.get("state") == "approval-responded":
            return False  # answered already: a repeated approval is ignored
        if part.get("state") != "approval-requested":
            raise ValueError(f"tool call {tool_call_id!r} is not waiting for an approval")
        asked = part.get("approval")
        request = {k: v for k, v in asked.items() if k == "requestReason"} if isinstance(asked, dict) else {}
        part["approval"] = {"id": tool_call_id, **request, "approved": approved, **({"reason": reason} if reason else {})}
        if approved:
            part["state"] = "approval-responded"
        else:
            part.update(state="output-denied", errorText=reason or "Tool execution denied by user.")
        return True

    return settle


async def apply_answer(db: Any, session_id: str, tool_call_id: str, settle: Settle) -> bool:
    """Apply ``settle`` to the call's part and persist the message. Returns ``True`` when that
    left no call of the message waiting (time to continue). The caller holds the session's turn
    lock, so this read-modify-write cannot interleave with a turn writing the same message."""
    for message in reversed(await db.list_messages(session_id)):
        if message.role != "assistant":
            continue
        part = next((p for p in message.parts if is_tool_part(p) and p.get("toolCallId") == tool_call_id), None)
        if part is None:
            continue
        if part.get("state") not in PENDING_TOOL_STATES or not settle(part):
            return False  # already answered: a repeated answer is ignored
        await db.upsert_message(session_id, message)
        return not any(is_tool_part(p) and p.get("state") in WAITING_STATES for p in message.parts)
    raise UnknownToolCall(tool_call_id, session_id)


@dataclass(frozen=True)
class ToolAnswer:
    """A client's answer to a pending tool call: its result (``output``, or ``error``) or, when
    ``approved`` is set, a human's decision on an approval request."""

    tool_call_id: str
    output: Any = None
    error: str | None = None
    approved: bool | None = None
    reason: str | None = None

    def settle(self) -> Settle:
        if self.approved is not None:
            return approval_update(self.tool_call_id, self.approved, self.reason)
        return result_update(self.tool_call_id, self.output, self.error)

    def as_dict(self) -> dict[str, Any]:
        """The answer as JSON (kept with a durable continuation)."""
        return {k: v for k, v in vars(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolAnswer:
        return cls(**{k: data[k] for k in ("tool_call_id", "output", "error", "approved", "reason") if k in data})
