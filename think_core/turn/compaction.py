"""Context compaction: keep the head and the tail of a conversation, summarise the middle.

Compaction is non-destructive: the store keeps every original message and records an overlay
(``add_compaction``) that the model-facing history shows as one summary message. Cutting only
at UI-message boundaries keeps every tool call with its result, because both live in the same
assistant message.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..models.base import ModelRequest, UserMessage
from ..models.content import tool_output_parts
from ..policy import CompactionConfig
from ..types import UIMessage

if TYPE_CHECKING:
    from ..store import AsyncStore

logger = logging.getLogger("think.compaction")

TokenCounter = Callable[[Sequence[UIMessage]], int]
Summarizer = Callable[[Sequence[UIMessage], int], str | Awaitable[str]]

SUMMARY_SYSTEM = (
    "You compress conversations. Summarise the conversation you are given so that an assistant "
    "can continue it: keep facts, decisions, names, numbers, open questions and tool results that "
    "matter. Write plain prose, no preamble."
)


@dataclass
class CompactionResult:
    reason: str
    shortened: bool
    tokens_before: int
    tokens_after: int
    compaction_id: int | None = None
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
        elif kind == "file":
            pieces.append(_file_mention(part))
        elif "toolCallId" in part:
            pieces.append(kind)
            pieces.append(json.dumps(part.get("input"), default=str))
            if "output" in part:
                pieces.append(_output_text(part.get("output")))
            if part.get("errorText"):
                pieces.append(part["errorText"])
    return " ".join(pieces)


def _file_mention(item: dict[str, Any]) -> str:
    """A file as the summariser (and the token estimate) sees it: named, never its bytes, which
    as text would be megabytes of base64."""
    name = f" {item['filename']}" if isinstance(item.get("filename"), str) else ""
    return f"[file {item.get('mediaType', '')}{name}]"


def _output_text(output: Any) -> str:
    if tool_output_parts(output) is None:
        return json.dumps(output, default=str)
    return " ".join(item.get("text", "") if item.get("type") == "text" else _file_mention(item) for item in output)


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


def plan(history: Sequence[UIMessage], config: CompactionConfig, count: TokenCounter) -> tuple[int, int] | None:
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


@dataclass(frozen=True)
class Compactor:
    """Compacts a session's history: summarises the middle with ``summarizer`` (or ``model``)
    and records the overlay in ``db``. It returns what it did; callers record it."""

    db: AsyncStore
    model: Any
    config: CompactionConfig
    summarizer: Summarizer | None = None

    async def compact(
        self, session_id: str, *, reason: str, token_counter: TokenCounter | None = None
    ) -> CompactionResult:
        db, config = self.db, self.config
        count = token_counter or estimate_tokens
        history = await db.history(session_id)
        span = plan(history, config, count)
        before = count(history)
        if span is None:
            return CompactionResult(reason, False, before, before)
        start, end = span
        middle = history[start:end]
        summary = await self._summarise(middle, config.summary_budget_tokens)
        if not summary:
            return CompactionResult(reason, False, before, before)
        compaction_id = await db.add_compaction(session_id, middle[0].id, middle[-1].id, summary)
        after = count(await db.history(session_id))
        logger.info(
            "session %s compacted (%s): %d messages, ~%d → ~%d tokens", session_id, reason, len(middle), before, after
        )
        return CompactionResult(reason, after < before, before, after, compaction_id, len(middle))

    async def _summarise(self, messages: Sequence[UIMessage], budget: int) -> str:
        if self.summarizer is None:
            return await summarize_with_model(self.model, messages, budget)
        summary = self.summarizer(messages, budget)
        if inspect.isawaitable(summary):
            summary = await summary
        return summary
