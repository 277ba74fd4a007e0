"""How long one plugin's hook implementations may take.

An agent has one limit (``Think(hook_timeout=30.0)``; ``None`` disables it). A plugin may have
its own, which wins, taken from the first of:

1. the ``hook_timeout`` key of its settings section (``Think(settings={"cache": {"hook_timeout": 5}})``),
   whether or not its settings model declares the field;
2. ``hook_timeout`` of its validated settings (a settings model may declare a default);
3. a ``hook_timeout`` attribute of the plugin (its author's default).

Each limit is ``None`` (no limit) or a positive number of seconds; anything else is a
:class:`~think_core.errors.ConfigurationError` when the agent is built.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError

__all__ = ["DEFAULT_HOOK_TIMEOUT", "SETTINGS_KEY", "HookLimits", "checked_limit", "section_for_model"]

DEFAULT_HOOK_TIMEOUT = 30.0
SETTINGS_KEY = "hook_timeout"

_UNSET = object()


def checked_limit(value: Any, where: str) -> float | None:
    """``value`` as a limit in seconds (``None``: no limit)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{where} must be a positive number of seconds or None, got {value!r}")
    return float(value)


def section_for_model(section: Any, model: type[Any]) -> Any:
    """A plugin's settings section as its settings model sees it: without the engine's
    ``hook_timeout`` key, unless the model declares that field itself (models often refuse
    fields they do not know)."""
    if isinstance(section, Mapping) and SETTINGS_KEY in section and SETTINGS_KEY not in getattr(model, "model_fields", {}):
        return {key: value for key, value in section.items() if key != SETTINGS_KEY}
    return section


class HookLimits:
    """Resolves the limit of each plugin from the agent's default and the plugin's own."""

    def __init__(self, default: float | None = DEFAULT_HOOK_TIMEOUT, settings: Mapping[str, Any] | None = None) -> None:
        self.default = checked_limit(default, "hook_timeout")
        self._settings = settings or {}

    def for_plugin(self, plugin: object, name: str) -> float | None:
        section = self._settings.get(name)
        if isinstance(section, Mapping) and SETTINGS_KEY in section:
            return checked_limit(section[SETTINGS_KEY], f"settings[{name!r}][{SETTINGS_KEY!r}]")
        own = getattr(getattr(plugin, "settings", None), SETTINGS_KEY, _UNSET)
        if own is not _UNSET:
            return checked_limit(own, f"plugin {name!r}: settings.{SETTINGS_KEY}")
        own = getattr(plugin, SETTINGS_KEY, _UNSET)
        if own is not _UNSET:
            return checked_limit(own, f"plugin {name!r}: {SETTINGS_KEY}")
        return self.default
