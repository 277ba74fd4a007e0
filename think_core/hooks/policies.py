"""Each hook's policy in the dispatcher's one call loop: whether the first result wins, whether a
failure is isolated (logged, skipped) or raised naming the plugin, and how a result becomes the
hook's answer (a config or decision model, a dict of its fields, an error classification)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from ..types import ERROR_CLASSIFICATIONS, ErrorClassification, StepConfig, ToolCallDecision, TurnConfig

__all__ = [
    "BROADCAST", "CLASSIFY", "REPLACE_ERROR", "SETUP", "STEP_CONFIG", "TOOL_DECISION", "TURN_CONFIG", "Policy",
]

_Config = TypeVar("_Config", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Policy:
    """How the dispatcher's call loop (:meth:`HookDispatcher._run`) treats one hook.

    ``first``: stop at the first result that is not ``None`` (after awaiting) and return it.
    ``isolate``: log and skip a raising implementation instead of raising ``PluginError``.
    ``accept``: turns a non-``None`` result into the hook's answer, raising ``TypeError`` /
    ``ValueError`` when it cannot (the answer is then skipped when isolated, else refused).
    """

    first: bool
    isolate: bool
    accept: Callable[[Any], Any] | None = None


def _model_of(model: type[_Config]) -> Callable[[Any], _Config]:
    def accept(result: Any) -> _Config:
        if isinstance(result, model):
            return result
        if isinstance(result, dict):
            return model.model_validate(result)  # a ValidationError is a ValueError
        raise TypeError(
            f"got {type(result).__name__}; expected {model.__name__}, a dict of its fields, or None"
        )

    return accept


def _classification(result: Any) -> ErrorClassification:
    if isinstance(result, str) and result in ERROR_CLASSIFICATIONS:
        return cast(ErrorClassification, result)
    raise ValueError(f"not one of {', '.join(ERROR_CLASSIFICATIONS)}")


BROADCAST = Policy(first=False, isolate=True)
SETUP = Policy(first=False, isolate=False)
REPLACE_ERROR = Policy(first=True, isolate=True)
CLASSIFY = Policy(first=True, isolate=True, accept=_classification)
TURN_CONFIG = Policy(first=True, isolate=False, accept=_model_of(TurnConfig))
STEP_CONFIG = Policy(first=True, isolate=False, accept=_model_of(StepConfig))
TOOL_DECISION = Policy(first=True, isolate=False, accept=_model_of(ToolCallDecision))
