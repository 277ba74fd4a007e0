"""Token and money budgets per turn and per session.

Registered under the entry point ``budget``; inactive until a limit is configured::

    Think(model="openai:gpt-4o", settings={"budget": {
        "turn_tokens": 20_000,
        "session_tokens": 200_000,
        "session_usd": 5.0,
        "prices": {"gpt-4o": {"input": 2.5, "output": 10.0}},  # USD per million tokens
    }})

What a session has spent is read from its stored answers (each records the tokens each model
used, ``metadata["usage"]``; see :class:`~think_core.SessionUsage`), so it survives a restart, is
the same for every process sharing the store, and a turn replayed after a crash counts once.

* A turn that would start over a session budget is refused in ``before_turn``, before any model
  request: the turn ends with ``status="error"`` and an error naming the budget; the user's
  message is kept (it was stored before the turn ran).
* A turn whose step crosses a token limit ends after that step: the step's tool calls are
  answered "budget exhausted" instead of running (``before_tool_call``, from
  ``ToolCallContext.usage``), and the next step is refused (``before_step``), so the turn ends
  with ``status="error"`` naming the budget; what it answered so far is kept. ``session_usd`` is
  checked before each step (a step's price needs its model, known once it finished).

Prices are USD per million tokens by model id, as the provider reports it in
``StepResult.model_id``; a key also prices the ids it is a prefix of (``"gpt-4o"`` prices
``"gpt-4o-2024-08-06"``). A model without a price counts as free, with a warning.

The hooks run ``tryfirst``. ``before_turn`` and ``before_step`` are ``firstresult``: a plugin
registered later with ``tryfirst`` that answers them first would hide these checks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from think_core import (
    SessionView,
    StepContext,
    ToolCallContext,
    ToolCallDecision,
    TurnContext,
    Usage,
    UsageRecords,
    block,
    hookimpl,
    plugin_settings,
)

__all__ = ["Budget", "BudgetExhausted", "BudgetSettings", "ModelPrice"]

logger = logging.getLogger("think.plugins.budget")


class BudgetExhausted(Exception):
    """A budget is used up; the message names it and what was used."""


class ModelPrice(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float
    output: float
    cached_input: float | None = None
    """For cached input tokens (default: the ``input`` price)."""


class BudgetSettings(BaseModel):
    """Settings of ``budget``. Without a limit it does nothing."""

    model_config = ConfigDict(extra="forbid")

    turn_tokens: int | None = None
    session_tokens: int | None = None
    session_usd: float | None = None
    prices: dict[str, ModelPrice] = {}


def tokens(usage: Usage) -> int:
    """A usage's tokens: its total, or input plus output when the provider reported no total."""
    return usage.total_tokens or usage.input_tokens + usage.output_tokens


class Budget:
    """Refuses turns and ends them once a budget is used up (see the module docstring).

    :param settings: :class:`BudgetSettings` or a dict of its fields; given here they win over
        ``Think(settings={"budget": ...})``.
    """

    name = "budget"
    settings_model: type[BudgetSettings] = BudgetSettings

    def __init__(self, settings: BudgetSettings | Mapping[str, Any] | None = None) -> None:
        self.settings = plugin_settings(BudgetSettings, settings)
        self._unpriced: set[str] = set()

    # -- pricing --------------------------------------------------------------------------------
    def price_of(self, model_id: str) -> ModelPrice | None:
        prices = self.settings.prices
        if model_id in prices:
            return prices[model_id]
        prefixes = [key for key in prices if model_id.startswith(key)]
        return prices[max(prefixes, key=len)] if prefixes else None

    def usd(self, by_model: Mapping[str, Usage]) -> float:
        """What ``by_model`` costs at the configured prices."""
        total = 0.0
        for model_id, usage in by_model.items():
            price = self.price_of(model_id)
            if price is None:
                if model_id not in self._unpriced:
                    self._unpriced.add(model_id)
                    logger.warning("budget: no price for model %r; its tokens count as free", model_id)
                continue
            cached = usage.cached_input_tokens
            cached_price = price.cached_input if price.cached_input is not None else price.input
            total += ((usage.input_tokens - cached) * price.input + cached * cached_price
                      + usage.output_tokens * price.output) / 1_000_000
        return total

    # -- what the session had spent when the turn started ----------------------------------------
    def _spent(self, session: SessionView, request_id: str) -> tuple[int, dict[str, Usage]]:
        """The session's tokens and usage by model before this turn (nothing if not recorded)."""
        recorded = session.state_for(self).get("spent")
        if recorded is None or recorded[0] != request_id:
            return 0, {}
        return recorded[1], recorded[2]

    def _exceeded(self, spent: int, spent_by_model: Mapping[str, Usage], turn: int | None) -> str | None:
        """Which budget is used up (a sentence naming it), given the session's spend before the
        turn and the turn's tokens so far (``None``: before the turn)."""
        s = self.settings
        used = spent + (turn or 0)
        if turn is not None and s.turn_tokens is not None and turn >= s.turn_tokens:
            return f"turn_tokens budget exhausted: this turn used {turn} of {s.turn_tokens} tokens"
        if s.session_tokens is not None and used >= s.session_tokens:
            return f"session_tokens budget exhausted: this session used {used} of {s.session_tokens} tokens"
        if s.session_usd is not None:
            usd = self.usd(spent_by_model)
            if usd >= s.session_usd:
                return f"session_usd budget exhausted: this session spent ${usd:.4f} of ${s.session_usd:.2f}"
        return None

    # -- hooks ----------------------------------------------------------------------------------
    @hookimpl(tryfirst=True)
    async def before_turn(self, ctx: TurnContext) -> None:
        """Refuse a turn that would start over a session budget (before any model request)."""
        s = self.settings
        if s.session_tokens is None and s.session_usd is None:
            return None
        session = ctx.session
        if not isinstance(session, UsageRecords):
            return None
        spent = await session.usage()
        session.state_for(self)["spent"] = (ctx.request_id, tokens(spent.total), spent.by_model)
        reason = self._exceeded(tokens(spent.total), spent.by_model, None)
        if reason is not None:
            raise BudgetExhausted(reason)
        return None

    @hookimpl(tryfirst=True)
    def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        """A step that crossed a token limit: its calls are answered "budget exhausted"."""
        if self.settings.turn_tokens is None and self.settings.session_tokens is None:
            return None
        spent, _ = self._spent(ctx.session, ctx.request_id)
        reason = self._exceeded(spent, {}, tokens(ctx.usage))
        if reason is None:
            return None
        return block(f"budget exhausted ({reason}); the tool was not run")

    @hookimpl(tryfirst=True)
    def before_step(self, ctx: StepContext) -> None:
        """End the turn before a step once a budget is used up."""
        if not ctx.steps or ctx.retry is not None:
            return None
        spent, spent_by_model = self._spent(ctx.session, ctx.request_id)
        turn_by_model: dict[str, Usage] = dict(spent_by_model)
        turn = Usage()
        for step in ctx.steps:
            key = step.model_id or "unknown"
            turn_by_model[key] = turn_by_model.get(key, Usage()) + step.usage
            turn = turn + step.usage
        reason = self._exceeded(spent, turn_by_model, tokens(turn))
        if reason is not None:
            raise BudgetExhausted(reason)
        return None
