"""An example third-party plugin for think: a per-turn tool call budget."""

from .budget import ToolBudget, ToolBudgetSettings

__all__ = ["ToolBudget", "ToolBudgetSettings"]
