"""The CLI's commands (``think serve`` among them) run on uvloop's loop when it is installed
(the ``fast`` extra), on asyncio's own with ``THINK_EVENT_LOOP=asyncio``."""

from __future__ import annotations

import asyncio

import pytest

from think_core.cli import event_loop

uvloop = pytest.importorskip("uvloop")


async def running_loop() -> asyncio.AbstractEventLoop:
    await asyncio.sleep(0)
    return asyncio.get_running_loop()


def test_commands_run_on_uvloop_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(event_loop.EVENT_LOOP_ENV, raising=False)
    assert isinstance(event_loop.run(running_loop()), uvloop.Loop)


def test_the_environment_chooses_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.EVENT_LOOP_ENV, "asyncio")
    loop = event_loop.run(running_loop())
    assert not isinstance(loop, uvloop.Loop) and isinstance(loop, asyncio.BaseEventLoop)
