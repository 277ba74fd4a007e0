"""Model fallback: a step whose model fails before any output is asked of the next model.

Registered under the entry point ``fallback``; inactive until ``models`` is configured::

    Think(model="openai:gpt-4o", settings={"fallback": {
        "models": ["anthropic:claude-sonnet-4-5", "google:gemini-2.5-flash"],
    }})

When a step fails before anything was streamed, the engine fires ``before_step`` again with
``ctx.retry`` (the attempt, the error and its classification). If the classification is one of
``on`` (default: ``transient`` — server errors, overload, dropped connections — and
``rate_limit``; the bundled classifier calls an exhausted quota ``fatal``, add it to ``on`` to
fall back on that too), this plugin answers ``StepConfig(model=<the next model>)``: the step is
asked of that model at once. The chain is the turn's model, then ``models`` in order; it starts
again from the turn's model at the next step. A failure after output has streamed is never
retried, so never falls back. Each step's ``StepResult.model_id`` (and the ``analytics`` step
record) says which model answered; the client gets a ``data-think-retry`` chunk naming it.

``before_step`` is ``firstresult``: on a retry this plugin answers first (``tryfirst``), so a
``StepConfig`` another plugin would give on that retry is not applied; on a step's first
attempt it has no opinion.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from think_core import StepConfig, StepContext, hookimpl, plugin_settings

__all__ = ["Fallback", "FallbackSettings"]


class FallbackSettings(BaseModel):
    """Settings of ``fallback``. Without ``models`` it does nothing."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    models: list[Any] = []
    """The models to fall back to, in order: model strings (``"anthropic:claude-sonnet-4-5"``)
    or model instances."""
    on: list[str] = ["transient", "rate_limit"]
    """The error classifications that move a step to the next model."""


class Fallback:
    """Answers a failed step's retry with the next model (see the module docstring).

    :param settings: :class:`FallbackSettings` or a dict of its fields; given here they win over
        ``Think(settings={"fallback": ...})``.
    """

    name = "fallback"
    settings_model: type[FallbackSettings] = FallbackSettings

    def __init__(self, settings: FallbackSettings | Mapping[str, Any] | None = None) -> None:
        self.settings = plugin_settings(FallbackSettings, settings)

    @hookimpl(tryfirst=True)
    def before_step(self, ctx: StepContext) -> StepConfig | None:
        """On a retry whose error is one of ``on``: the model after the one that failed."""
        retry = ctx.retry
        if retry is None or not self.settings.models:
            return None
        state = ctx.session.state_for(self)
        step = (ctx.request_id, ctx.step_number)
        tried = state.get("tried")
        index = tried[1] + 1 if tried is not None and tried[0] == step else 0
        if retry.classification not in self.settings.on or index >= len(self.settings.models):
            # Stay on the model that failed: the engine retries it or ends the step.
            return StepConfig(model=retry.model)
        state["tried"] = (step, index)
        return StepConfig(model=self.settings.models[index])
