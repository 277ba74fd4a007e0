"""Context compaction: keep the head and the tail of a conversation, summarise the middle.

Compaction is non-destructive: the store keeps every original message and records an overlay
(``add_compaction``) that the model-facing history shows as one summary message. Cutting only
at UI-message boundaries keeps every tool call with its result, because both live in the same
assistant message.
"""

from __future__ import annotations

import json
import logging
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Optional, Sequence, Union

from pydantic import BaseModel, Field

from .models.base import ModelRequest, UserMessage
from .types import UIMessage

if TYPE_CHECKING:
    from .session import Session

logger = logging.getLogger("think.compaction")

TokenCounter = Callable[[Sequence[UIMessage]], int]
Summarizer = Callable[[Sequence[UIMessage], int], Union[str, Awaitable[str]]]

SUMMARY_SYSTEM = (
    "You compress conversations. Summarise the conversation you are given so that an assistant "
    "can continue it: keep facts, decisions, names, numbers, open questions and tool results that "
    "matter. Write plain prose, no preamble."
)


class ProactiveConfig(BaseModel):
    max_input_tokens: int = Field(gt=0)
    headroom: float = Field(0.9, gt=0, le=1)
    max_compactions: int = Field(1, ge=1)

    @property
    def threshold(self) -> int:
        return int(self.max_input_tokens * self.headroom)


class ContextOverflowConfig(BaseModel):
    """``Think(context_overflow={...})``: reactive compact-and-retry, and the proactive guard."""

    reactive: bool = False
    max_retries: int = Field(1, ge=0)
    proactive: Optional[ProactiveConfig] = None


class CompactionConfig(BaseModel):
    """Which messages compaction protects."""

    protect_head: int = Field(1, ge=0)
    tail_tokens: int = Field(2000, ge=0)
    min_tail_messages: int = Field(2, ge=1)
    summary_budget_tokens: int = Field(8000, gt=0)


class RetryConfig(BaseModel):
    """Bounded retries of a step that failed with ``"transient"`` / ``"rate_limit"`` before any output."""

    max_retries: int = Field(2, ge=0)
    base_delay: float = Field(0.5, ge=0)
    max_delay: float = Field(20.0, ge=0)


@dataclass
class CompactionResult:
    reason: str
    shortened: bool
    tokens_before: int
    tokens_after: int
    compaction_id: Optional[int] = None
    compacted_messages: int = 0


def estimate_tokens(messages: Sequence[UIMessage]) -> int:
    """A provider-free estimate: ``max(chars / 4, words * 1.3)`` plus 4 tokens per message."""
    total = 0
    for message in messages:
        text = _message_text(message)
        total += max(len(text) // 4, int(len(text.split()) * 1.3)) + 4
    return total


def _message_text(message: UIMessage) -> str:
    pieces = []
    for part in message.parts:
        kind = part.get("type", "")
        if kind in ("text", "reasoning"):
            pieces.append(part.get("text", ""))
        elif "toolCallId" in part:
            pieces.append(kind)
            pieces.append(json.dumps(part.get("input"), default=str))
            if "output" in part:
                pieces.append(json.dumps(part.get("output"), default=str))
            if part.get("errorText"):
                pieces.append(part["errorText"])
    return " ".join(pieces)


def transcript(messages: Sequence[UIMessage], budget_tokens: int) -> str:
    """A plain-text transcript for the summariser, trimmed from the oldest end to fit."""
    lines = [f"{m.role}: {_message_text(m)}" for m in messages]
    budget_chars = budget_tokens * 4
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        if used + len(line) > budget_chars:
            room = budget_chars - used
            if room > 200:
                kept.append("…" + line[-room:])
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(reversed(kept))


async def summarize_with_model(model: Any, messages: Sequence[UIMessage], budget_tokens: int) -> str:
    """Summarise with the agent's model. The request is budgeted so it fits."""
    request = ModelRequest(
        system=SUMMARY_SYSTEM,
        messages=[UserMessage(content=transcript(messages, budget_tokens))],
    )
    text: list[str] = []
    async with aclosing(model.stream(request)) as events:
        async for event in events:
            if event.type == "text-delta":
                text.append(event.text)
            elif event.type == "error":
                raise event.error
    return "".join(text).strip()


def plan(history: Sequence[UIMessage], config: CompactionConfig, count: TokenCounter) -> Optional[tuple[int, int]]:
    """The ``[start, end)`` range of ``history`` to summarise, or ``None`` when nothing can be."""
    head = min(config.protect_head, len(history))
    tail_start = len(history)
    tail_tokens = 0
    while tail_start > head:
        candidate = history[tail_start - 1]
        size = count([candidate])
        kept = len(history) - tail_start
        if kept >= config.min_tail_messages and tail_tokens + size > config.tail_tokens:
            break
        tail_tokens += size
        tail_start -= 1
    # The tail must begin with a user message where possible, so the model sees a turn start.
    while tail_start < len(history) - 1 and history[tail_start].role == "assistant" and tail_start > head:
        tail_start += 1
    if tail_start - head < 1:
        return None
    return head, tail_start


async def compact_session(
    session: "Session",
    *,
    reason: str,
    token_counter: Optional[TokenCounter] = None,
) -> Optional[CompactionResult]:
    """Summarise the middle of ``session``'s history. ``None`` when there was nothing to compact."""
    agent = session.agent
    db = agent.db
    count = token_counter or estimate_tokens
    history = await db.history(session.id)
    config: CompactionConfig = agent.compaction
    span = plan(history, config, count)
    before = count(history)
    if span is None:
        return CompactionResult(reason, False, before, before)
    start, end = span
    middle = history[start:end]
    summarizer = agent.summarizer
    budget = config.summary_budget_tokens
    if summarizer is None:
        summary = await summarize_with_model(agent.model, middle, budget)
    else:
        summary = summarizer(middle, budget)
        if hasattr(summary, "__await__"):
            summary = await summary
    if not summary:
        return CompactionResult(reason, False, before, before)
    compaction_id = await db.add_compaction(session.id, middle[0].id, middle[-1].id, summary)
    after = count(await db.history(session.id))
    result = CompactionResult(reason, after < before, before, after, compaction_id, len(middle))
    logger.info(
        "session %s compacted (%s): %d messages, ~%d → ~%d tokens", session.id, reason, len(middle), before, after
    )
    session.compaction_events.append(result)
    return result
