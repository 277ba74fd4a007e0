"""Where think keeps the files nobody named: the user's data directory, never the current one.

``$THINK_HOME`` when set (tests, or to keep several setups apart), else the platform's user data
directory for ``think`` (``platformdirs``): ``$XDG_DATA_HOME/think``, by default
``~/.local/share/think``, on Linux; ``~/Library/Application Support/think`` on macOS;
``%LOCALAPPDATA%\\think`` on Windows.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

__all__ = ["HOME_ENV", "data_dir"]

HOME_ENV = "THINK_HOME"


def data_dir(*, create: bool = False) -> Path:
    """think's data directory (see the module docstring); made, with its parents, when ``create``.

    Not created by default, so that merely building an agent writes nothing: whoever writes the
    first file there creates it.
    """
    raw = os.environ.get(HOME_ENV)
    path = Path(raw).expanduser() if raw else Path(platformdirs.user_data_dir("think", appauthor=False))
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
