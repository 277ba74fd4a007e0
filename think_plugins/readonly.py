"""Read-only mode: block every tool that is not annotated ``read_only``.

Registered under the entry point ``readonly_guard``. Its ``before_tool_call`` runs
``tryfirst`` so that no later plugin — in particular the tool cache — can answer a call the
guard would refuse: a cached result of a mutating-but-idempotent tool must not leak out of a
read-only session.

Read-only mode is on for a tool call when any of these holds:

* the plugin's settings say ``{"enabled": true}`` (``Think(settings={"readonly_guard": ...})``);
* the environment has ``THINK_READONLY=1`` (also ``true``/``yes``/``on``), read at call time;
* the running turn's ``body`` has ``{"read_only": true}`` and ``honor_body`` is on (default).

The body can only *tighten*: ``{"read_only": false}`` does not switch off a mode that the
operator enabled through settings or the environment, because the body comes from the client
and a client must not be able to escape the operator's read-only mode.

Tools named in ``allow`` run even in read-only mode (for tools that are safe but carry no
annotation, such as third-party tools you cannot annotate).

The block reason is written for the model: it names the tool, says the session is read-only
and lists the tools that may still run, so the model can pick another tool or answer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from think_core import ToolCallContext, ToolCallDecision, TurnContext, block, hookimpl

__all__ = ["ReadOnlyGuard", "ReadOnlyGuardSettings", "ENV_VAR", "BODY_KEY"]

ENV_VAR = "THINK_READONLY"
BODY_KEY = "read_only"
_TRUE_STRINGS = frozenset({"1", "true", "yes", "on"})


class ReadOnlyGuardSettings(BaseModel):
    """Settings of ``readonly_guard``. Off by default: installing the plugin changes nothing
    until read-only mode is asked for."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    """Read-only mode for every turn of every session of the agent."""
    honor_body: bool = True
    """Let a turn's ``body`` (``{"read_only": true}``) switch read-only mode on for that turn."""
    allow: list[str] = []
    """Tool names that may run in read-only mode although they are not annotated ``read_only``."""


def _truthy(value: Any) -> bool:
    """A flag from JSON or the environment: ``True``, ``1`` or a yes-like string."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value == 1
    if isinstance(value, str):
        return value.strip().lower() in _TRUE_STRINGS
    return False


class ReadOnlyGuard:
    """Blocks non-read-only tools while read-only mode is on (see the module docstring).

    :param settings: :class:`ReadOnlyGuardSettings` or a dict of its fields. Settings given here
        win: the instance then ignores ``Think(settings={"readonly_guard": ...})``. Built without
        them (as the entry-point loader does), it is configured from that section.
    """

    name = "readonly_guard"
    #: read by the plugin loader: ``Think(settings={name: {...}})`` is validated with it
    settings_model: type[ReadOnlyGuardSettings] = ReadOnlyGuardSettings

    def __init__(self, settings: ReadOnlyGuardSettings | Mapping[str, Any] | None = None) -> None:
        self.settings = (
            settings
            if isinstance(settings, ReadOnlyGuardSettings)
            else ReadOnlyGuardSettings.model_validate(settings or {})
        )

    # -- mode ---------------------------------------------------------------------------------
    def operator_enabled(self) -> bool:
        """Read-only mode set by the operator (settings or environment), whatever the turn says."""
        return self.settings.enabled or _truthy(os.environ.get(ENV_VAR, ""))

    def is_read_only(self, body: Mapping[str, Any] | None) -> bool:
        """Whether a turn with ``body`` runs in read-only mode."""
        if self.operator_enabled():
            return True
        return bool(self.settings.honor_body and body and _truthy(body.get(BODY_KEY)))

    # -- hooks --------------------------------------------------------------------------------
    @hookimpl(tryfirst=True)
    def before_turn(self, ctx: TurnContext) -> None:
        """Remember which tools of this turn are read-only, to list them in block reasons.

        ``ToolCallContext`` carries only the called tool, not the turn's tool set. This only
        observes (returns ``None``); if another plugin's decision hides it, the reason falls
        back to a generic description of what may run.
        """
        names = sorted(
            name
            for name, tool in ctx.tools.items()
            if getattr(getattr(tool, "annotations", None), "read_only", False)
            or name in self.settings.allow
        )
        ctx.session.state_for(self)["turn_tools"] = (ctx.request_id, names)
        return None

    @hookimpl(tryfirst=True)
    def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        """Block the call when read-only mode is on and the tool is not read-only."""
        annotations = getattr(ctx.tool, "annotations", None)
        if getattr(annotations, "read_only", False) or ctx.tool_name in self.settings.allow:
            return None
        if not self.is_read_only(ctx.body):
            return None
        return block(self._reason(ctx))

    def _reason(self, ctx: ToolCallContext) -> str:
        recorded = ctx.session.state_for(self).get("turn_tools")
        if recorded is not None and recorded[0] == ctx.request_id:
            allowed = ", ".join(recorded[1]) if recorded[1] else "none"
            what = f"Tools you may use: {allowed}."
        else:
            what = "Only tools that are marked read-only may run."
        return (
            f'Tool "{ctx.tool_name}" was blocked: this session is in read-only mode, so tools '
            f"that can change anything are not allowed. {what} Answer without changing anything, "
            "or tell the user the change needs read-only mode to be switched off."
        )
