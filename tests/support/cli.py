"""The ``think`` command as a user runs it: a child process with its own ``THINK_HOME`` and no
``THINK_`` variables of this environment, never a traceback on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def think(
    cwd: Path, home: Path, *args: str, stdin: str | None = "", **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")}
    environ.update(THINK_HOME=str(home), COLUMNS="200", **env)
    done = subprocess.run(
        [sys.executable, "-m", "think_core.cli", *args],
        input=stdin, capture_output=True, text=True, timeout=120, cwd=cwd, env=environ,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done
