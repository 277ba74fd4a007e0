"""A well-behaved class plugin with settings and per-instance state."""

from __future__ import annotations

from pydantic import BaseModel

from think_core import ToolCallContext, ToolCallDecision, block, hookimpl


class GoodSettings(BaseModel):
    blocked_tool: str = "rm"


class GoodPlugin:
    """Blocks one configurable tool and counts the calls it has seen."""

    settings_model = GoodSettings
    settings: GoodSettings

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        self.seen.append(ctx.tool_name)
        if ctx.tool_name == self.settings.blocked_tool:
            return block(f"{ctx.tool_name} is blocked by sample_good")
        return None

    @hookimpl
    def on_chunk(self) -> None:
        self.seen.append("chunk")
