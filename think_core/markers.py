"""The pluggy markers. ``think`` is the project name and the entry-point group."""

from __future__ import annotations

import pluggy

PROJECT = "think"
ENTRY_POINT_GROUP = PROJECT

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
