"""Plugin names as the user writes them: the environment's lists, the installed entry points,
and the check that every name the user gave matches a plugin.

A misspelt name in ``disable=``, ``THINK_DISABLE_PLUGINS`` or a settings section would otherwise
do nothing at all — the plugin the user meant to turn off or configure keeps running with its
defaults — so each one is an error that suggests the closest real name.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
from collections.abc import Collection, Iterable
from typing import Literal

from ..errors import ConfigurationError
from .markers import ENTRY_POINT_GROUP

__all__ = [
    "BROKEN_PLUGINS_ENV",
    "BrokenPlugins",
    "broken_plugins_mode",
    "check_plugin_names",
    "env_names",
    "installed_plugin_names",
]

#: What to do when an installed entry-point plugin fails to load: stop (``error``) or run without it.
BrokenPlugins = Literal["error", "warn"]
BROKEN_PLUGINS_ENV = "THINK_BROKEN_PLUGINS"


def env_names(variable: str) -> frozenset[str] | None:
    """A comma-separated name list from the environment; ``None`` when the variable is unset."""
    raw = os.environ.get(variable)
    if raw is None:
        return None
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def installed_plugin_names() -> frozenset[str]:
    """The names of the installed entry points of group ``think`` (nothing is imported)."""
    return frozenset(ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def check_plugin_names(names: Iterable[str], known: Collection[str], where: str) -> None:
    """Raise :class:`ConfigurationError` naming every name of ``names`` that is not in ``known``,
    each with the closest known name when there is one. ``where`` says where the names came from."""
    unknown = sorted(set(names) - set(known))
    if not unknown:
        return
    problems = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(known), n=1)
        problems.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    listing = ", ".join(sorted(known)) or "none"
    noun = "plugin" if len(unknown) == 1 else "plugins"
    raise ConfigurationError(f"{where}: no {noun} named {', '.join(problems)}; the plugins here are: {listing}")


def broken_plugins_mode(value: str | None) -> BrokenPlugins:
    """``value`` (``Think(broken_plugins=...)``), else ``$THINK_BROKEN_PLUGINS``, else ``error``."""
    source = "broken_plugins" if value is not None else f"${BROKEN_PLUGINS_ENV}"
    raw = value if value is not None else os.environ.get(BROKEN_PLUGINS_ENV) or "error"
    mode = raw.strip().lower()
    if mode == "error":
        return "error"
    if mode == "warn":
        return "warn"
    raise ConfigurationError(f"{source} must be 'error' or 'warn', not {raw!r}")
