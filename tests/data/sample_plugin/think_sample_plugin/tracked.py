"""A module plugin whose import leaves a trace, so tests can prove when it was NOT imported.

If ``THINK_SAMPLE_IMPORT_MARKER`` names a file, importing this module appends a line to it.
"""

from __future__ import annotations

import os

from think_core import StepResult, hookimpl

_marker = os.environ.get("THINK_SAMPLE_IMPORT_MARKER")
if _marker:
    with open(_marker, "a", encoding="utf-8") as marker:
        marker.write("imported\n")


@hookimpl
def on_step_finish(ctx: StepResult) -> None:
    """Observe steps (its presence makes the hook list of this plugin non-empty)."""
