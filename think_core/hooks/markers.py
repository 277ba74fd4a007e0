"""The pluggy markers. ``think`` is the project name and the entry-point group.

The distribution is ``think-agent`` (``think`` on PyPI is an unrelated project); the import
packages (``think_core``, ``think_plugins``), the command and the entry-point group are ``think``.
"""

from __future__ import annotations

import pluggy

PROJECT = "think"
ENTRY_POINT_GROUP = PROJECT
DISTRIBUTION = "think-agent"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
