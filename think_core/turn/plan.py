"""A turn's plan — the settings every step starts from once ``before_turn`` has spoken — and
the small rules that shape it: extra tools must be tools, a request never ends with the
assistant's message, and what a compaction chunk says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..models.base import CallSettings, ModelMessage, OutputSpec, UserMessage, deep_merge
from ..tools import AnyTool, Tool
from .compaction import CompactionResult

__all__ = ["TurnPlan", "checked_tools", "compaction_data", "step_settings", "with_continue_checkpoint"]


@dataclass
class TurnPlan:
    """The turn's settings after ``before_turn``: what every step starts from."""

    model: Any
    system: str
    tools: dict[str, AnyTool]
    active_tools: list[str] | None
    tool_choice: Any
    max_steps: int
    output: Any
    output_spec: OutputSpec | None
    settings: CallSettings


_CONTINUE_CHECKPOINT = "Continue your previous response from exactly where it left off. Do not repeat any of it."


def checked_tools(extra: list[Any] | None) -> dict[str, AnyTool]:
    tools: dict[str, AnyTool] = {}
    for item in extra or ():
        if not isinstance(item, Tool):
            raise TypeError(f"TurnConfig.tools must hold Tool objects (use @tool), got {item!r}")
        tools[item.name] = item
    return tools


def with_continue_checkpoint(messages: list[ModelMessage]) -> list[ModelMessage]:
    """A request must not end with the assistant's message (providers reject prefill): ask the
    model to continue instead. The checkpoint is never persisted."""
    if messages and messages[-1].role == "assistant":
        return [*messages, UserMessage(content=_CONTINUE_CHECKPOINT)]
    return messages


def compaction_data(result: CompactionResult) -> dict[str, Any]:
    """The ``data-think-compaction`` chunk's payload."""
    return {
        "reason": result.reason,
        "messages": result.compacted_messages,
        "tokensBefore": result.tokens_before,
        "tokensAfter": result.tokens_after,
    }


def step_settings(settings: CallSettings, provider_options: dict[str, Any] | None) -> CallSettings:
    """The turn's call settings with a step's ``provider_options`` deep-merged over its own."""
    if not provider_options:
        return settings
    merged = deep_merge(settings.provider_options or {}, provider_options)
    return settings.model_copy(update={"provider_options": merged})
