"""Cap the number of tool calls the model may make in one turn.

A model stuck in a loop (search, search again, search once more...) burns time and tokens.
Past ``max_calls_per_turn`` calls in a turn, every further call is blocked with a reason that
tells the model to answer with what it has. Tools named in ``exempt`` are never counted.

Why it is written the way it is (the points a third-party plugin should copy):

* Only ``from think_core import ...``: the public plugin API.
* One instance serves every session of an agent, so the per-turn counter lives in
  ``ctx.session.state_for(self)``, never on ``self``.
* ``settings_model`` lets the loader validate ``Think(settings={"tool_budget": {...}})`` and
  report a bad field at start-up, naming the plugin.
* No ``tryfirst``: the bundled read-only guard (``tryfirst``) still decides first, and the
  bundled tool cache (``trylast``) is only asked about calls within budget.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from think_core import ToolCallContext, ToolCallDecision, block, hookimpl


class ToolBudgetSettings(BaseModel):
    """Settings of ``tool_budget``."""

    model_config = ConfigDict(extra="forbid")

    max_calls_per_turn: int = Field(default=10, ge=0)
    exempt: list[str] = []


class ToolBudget:
    """Blocks tool calls beyond the per-turn budget."""

    name = "tool_budget"  # the settings key, also when registered with Think(plugins=[...])
    settings_model = ToolBudgetSettings

    def __init__(self) -> None:
        self.settings = ToolBudgetSettings()

    @hookimpl
    def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        if ctx.tool_name in self.settings.exempt:
            return None
        state = ctx.session.state_for(self)
        if state.get("request_id") != ctx.request_id:  # a new turn: reset the counter
            state["request_id"], state["calls"] = ctx.request_id, 0
        state["calls"] += 1
        limit = self.settings.max_calls_per_turn
        if state["calls"] <= limit:
            return None
        return block(
            f'Tool "{ctx.tool_name}" was blocked: the budget of {limit} tool call(s) per turn is '
            "used up. Answer with the information you already have."
        )
