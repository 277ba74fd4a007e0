"""``make_agent``: builds ``Think`` agents and remembers them, so they are closed after the test.

The suite's ``conftest.py`` closes, after every test, whatever the shared factory built during it
(``Think.close``: the store and its executor); a test whose plugins or MCP servers hold
asynchronous resources awaits :meth:`AgentFactory.aclose` in a fixture of its own, which runs first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from think_core.agent import Think


class AgentFactory:
    """Builds agents with entry-point plugins off (unless asked for) and closes all it built."""

    def __init__(self) -> None:
        self.built: list[Think] = []

    def __call__(self, model: Any, *, tools: Iterable[Any] = (), plugins: Iterable[Any] = (), **kwargs: Any) -> Think:
        kwargs.setdefault("load_entrypoints", False)
        agent = Think(model, tools=list(tools), plugins=list(plugins), **kwargs)
        self.built.append(agent)
        return agent

    def using(self, **defaults: Any) -> Callable[..., Think]:
        """This factory with other defaults (a test file's tools, an in-memory store); a call's
        own keywords still win."""

        def build(model: Any, **kwargs: Any) -> Think:
            return self(model, **{**defaults, **kwargs})

        return build

    def close(self) -> None:
        while self.built:
            self.built.pop().close()

    async def aclose(self) -> None:
        while self.built:
            await self.built.pop().aclose()


make_agent = AgentFactory()


def other_tasks() -> list[asyncio.Task]:
    """The event loop's unfinished tasks other than the caller's (what a test leaves running)."""
    me = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not me and not t.done()]
