"""The event loop the CLI runs its commands on: uvloop's when installed.

``think serve`` relays every event of every live chat (the model's read, the hooks, the UI
stream's write); uvloop does the loop's share of that (polling, callbacks, socket writes) in C,
at a fraction of asyncio's cost per event. It comes with the ``fast`` extra; without it, or with
``THINK_EVENT_LOOP=asyncio``, the commands run on asyncio's own loop.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["EVENT_LOOP_ENV", "loop_factory", "run"]

EVENT_LOOP_ENV = "THINK_EVENT_LOOP"
T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor when it is installed and not switched off, else ``None``
    (asyncio's default)."""
    if os.environ.get(EVENT_LOOP_ENV, "").strip().lower() == "asyncio":
        return None
    if importlib.util.find_spec("uvloop") is None:
        return None
    import uvloop

    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
