"""All five bundled plugins together, loaded through their real entry points.

The package is pip-installed (editable), so its ``think`` entry points are real metadata; each
test re-enables entry-point loading with ``monkeypatch.delenv("THINK_PLUGINS")`` and configures
the plugins only through ``Think(settings=...)``, as a user would.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import make_agent
from tests.support.scripted import tool_outputs
from think_core import tool
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call
from think_plugins.analytics import read_sqlite_points

BUNDLED = {"readonly_guard", "tool_cache", "analytics", "overflow_classifier", "otel", "fallback", "budget", "redact"}


class Tools:
    """A read-only lookup, an idempotent-but-writing tool, a destructive one and a failing one."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()

        @tool(read_only=True)
        def get_price(item: str) -> dict[str, Any]:
            """Read a price."""
            self.ran["get_price"] += 1
            return {"item": item, "price": 10 + self.ran["get_price"]}

        @tool(idempotent=True)
        def set_price(item: str, price: int) -> str:
            """Set a price: idempotent (cacheable) but not read-only."""
            self.ran["set_price"] += 1
            return f"{item} costs {price}"

        @tool(destructive=True)
        def delete_item(item: str) -> str:
            """Delete an item."""
            self.ran["delete_item"] += 1
            return f"deleted {item}"

        @tool(read_only=True)
        def flaky() -> str:
            """Always fails."""
            raise RuntimeError("flaked")

        self.all = [get_price, set_price, delete_item, flaky]


def calls_then_answer(*calls: tuple[str, dict[str, Any]]) -> list[Any]:
    return [*(Step(tool_calls=[call(name, args)]) for name, args in calls), "ok"]


@pytest.fixture
def entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("THINK_PLUGINS")


def bundled_agent(tmp_path: Path, model: ScriptedModel, tools: Tools, *, cache: dict | None = None,
         analytics: dict | None = None) -> Think:
    settings = {
        "tool_cache": cache if cache is not None else {"backend": "sqlite", "path": str(tmp_path / "cache.db")},
        "analytics": analytics if analytics is not None else {"path": str(tmp_path / "analytics.db")},
    }
    return make_agent(model, tools=tools.all, settings=settings, load_entrypoints=True)


def plugin(agent: Think, name: str) -> Any:
    return agent.plugin_manager.get_plugin(name)


async def test_all_five_load_from_entry_points_guard_before_cache(entry_points: None, tmp_path: Path) -> None:
    agent = bundled_agent(tmp_path, ScriptedModel([]), Tools())
    infos = {info.name: info for info in agent.plugin_manager.plugin_infos}
    assert set(infos) == BUNDLED
    assert all(info.status == "loaded" and info.distribution == "think-agent" for info in infos.values())
    order = [impl.plugin_name for impl in reversed(agent.plugin_manager.hook.before_tool_call.get_hookimpls())]
    # otel only observes (returns None); budget answers "budget exhausted" only once a limit is set.
    assert order == ["readonly_guard", "otel", "budget", "tool_cache"]
    assert plugin(agent, "tool_cache").settings.backend == "sqlite"


async def test_cached_answer_cannot_bypass_read_only_mode(entry_points: None, tmp_path: Path) -> None:
    """set_price is cacheable (idempotent) but not read-only. Its result is cached outside
    read-only mode; in read-only mode the guard blocks it although the cache holds an answer;
    the next normal turn is served from that same cache entry, so it existed all along."""
    tools = Tools()
    set_it = ("set_price", {"item": "tea", "price": 3})
    model = ScriptedModel([*calls_then_answer(set_it), *calls_then_answer(set_it), *calls_then_answer(set_it)])
    agent = bundled_agent(tmp_path, model, tools)
    session = agent.session("s")
    cache = plugin(agent, "tool_cache")

    await session.chat("set it")
    assert tools.ran["set_price"] == 1 and cache.stats.stores == 1

    result = await session.chat("set it again", body={"read_only": True})
    assert result.status == "completed"
    blocked = tool_outputs(model)[-1]
    assert blocked.startswith('Tool "set_price" was blocked: this session is in read-only mode')
    assert "get_price" in blocked and "flaky" in blocked
    assert cache.stats.hits == 0 and tools.ran["set_price"] == 1

    await session.chat("set it once more")
    assert tool_outputs(model)[-1] == "tea costs 3"
    assert cache.stats.hits == 1 and tools.ran["set_price"] == 1

    await plugin(agent, "analytics").drain()  # its sink is written in the background
    outcomes = [
        p["blobs"][1]
        for p in read_sqlite_points(tmp_path / "analytics.db")
        if p["kind"] == "tool_call"
    ]
    assert outcomes == ["executed", "blocked", "substituted"]


async def test_read_only_tool_cached_destructive_tool_invalidates_and_every_outcome_recorded(
    entry_points: None, tmp_path: Path
) -> None:
    tools = Tools()
    price = ("get_price", {"item": "tea"})
    model = ScriptedModel(
        calls_then_answer(price, price, ("delete_item", {"item": "tea"}), price, ("flaky", {}))
    )
    agent = bundled_agent(tmp_path, model, tools)
    result = await agent.session("s").chat("go", body={"read_only": False})
    assert result.status == "completed"
    assert tool_outputs(model)[:4] == [
        {"item": "tea", "price": 11}, {"item": "tea", "price": 11}, "deleted tea", {"item": "tea", "price": 12},
    ]
    assert tools.ran == Counter({"get_price": 2, "delete_item": 1})
    assert plugin(agent, "tool_cache").stats.invalidations == 1

    await plugin(agent, "analytics").drain()  # its sink is written in the background
    points = read_sqlite_points(tmp_path / "analytics.db")
    recorded = [tuple(p["blobs"]) for p in points if p["kind"] == "tool_call"]
    assert recorded == [
        ("get_price", "executed"), ("get_price", "substituted"), ("delete_item", "executed"),
        ("get_price", "executed"), ("flaky", "failed"),
    ]
    assert [p["kind"] for p in points].count("step") == 6
    assert [p["blobs"][0] for p in points if p["kind"] == "turn"] == ["completed"]


async def test_crashing_analytics_sink_never_fails_a_turn(
    entry_points: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = Tools()
    model = ScriptedModel(calls_then_answer(("get_price", {"item": "tea"})))
    agent = bundled_agent(tmp_path, model, tools, analytics={"path": str(tmp_path / "no-such-dir" / "a.db")})
    result = await agent.session("s").chat("go")
    assert result.status == "completed" and result.text == "ok"
    await plugin(agent, "analytics").drain()
    assert plugin(agent, "analytics").dropped == 4
    assert any(
        r.name == "think.plugins.analytics" and r.levelno == logging.WARNING and "dropped 4" in r.getMessage()
        for r in caplog.records
    )


async def test_sqlite_cache_is_shared_by_two_agents_over_one_file(entry_points: None, tmp_path: Path) -> None:
    price = ("get_price", {"item": "tea"})
    tools_a, tools_b = Tools(), Tools()
    model_a = ScriptedModel(calls_then_answer(price))
    model_b = ScriptedModel(calls_then_answer(price))
    agent_a = bundled_agent(tmp_path, model_a, tools_a)
    agent_b = bundled_agent(tmp_path, model_b, tools_b)
    await agent_a.session("one").chat("go")
    await agent_b.session("two").chat("go")
    assert tools_a.ran["get_price"] == 1 and tools_b.ran["get_price"] == 0
    assert tool_outputs(model_b) == [{"item": "tea", "price": 11}]
    assert plugin(agent_b, "tool_cache").stats.hits == 1


def test_think_plugins_json_lists_all_five_with_their_hooks(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("THINK_PLUGINS", "THINK_DISABLE_PLUGINS")}
    completed = subprocess.run(
        [sys.executable, "-m", "think_core.cli", "plugins", "--json"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=True,
    )
    rows = {row["name"]: row for row in json.loads(completed.stdout)}
    assert BUNDLED <= set(rows)
    assert all(rows[name]["status"] == "loaded" for name in BUNDLED)
    assert set(rows["readonly_guard"]["hooks"]) == {"before_turn", "before_tool_call"}
    assert set(rows["tool_cache"]["hooks"]) == {"before_tool_call", "after_tool_call"}
    assert set(rows["analytics"]["hooks"]) == {
        "before_turn", "before_step", "after_tool_call", "on_step_finish", "on_chat_response",
        "register_commands",
    }
    assert rows["overflow_classifier"]["hooks"] == ["classify_chat_error"]
    assert set(rows["otel"]["hooks"]) == {
        "before_turn", "before_step", "classify_chat_error", "before_tool_call", "after_tool_call",
        "on_step_finish", "on_chat_error", "on_chat_response",
    }
    assert list(tmp_path.iterdir()) == []  # listing plugins creates no analytics or cache files


# -- the third-party template (examples/think-example-plugin) ---------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "think-example-plugin"


@pytest.fixture
def example_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example distribution pip-installed into a --target dir and put on sys.path."""
    source = tmp_path / "src"
    shutil.copytree(EXAMPLE, source)  # building writes build/ and *.egg-info beside it
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
            "--no-build-isolation", "--disable-pip-version-check", "--target", str(target),
            str(source),
        ],
        check=True, capture_output=True, timeout=300,
    )
    monkeypatch.syspath_prepend(str(target))
    importlib.invalidate_caches()
    yield
    for module in [m for m in sys.modules if m.split(".")[0] == "think_example_plugin"]:
        del sys.modules[module]
    importlib.invalidate_caches()


async def test_example_plugin_installs_and_composes_with_the_bundled_five(
    entry_points: None, example_installed: None, tmp_path: Path
) -> None:
    tools = Tools()
    price = ("get_price", {"item": "tea"})
    model = ScriptedModel(calls_then_answer(price, ("set_price", {"item": "tea", "price": 1}), price))
    agent = make_agent(
        model, tools=tools.all, load_entrypoints=True,
        settings={
            "tool_budget": {"max_calls_per_turn": 1},
            "analytics": {"path": str(tmp_path / "analytics.db")},
        },
    )
    infos = {info.name: info for info in agent.plugin_manager.plugin_infos}
    assert set(infos) == BUNDLED | {"tool_budget"}
    assert infos["tool_budget"].distribution == "think-example-plugin"
    assert infos["tool_budget"].hooks == ("before_tool_call",)

    # guard (tryfirst) blocks set_price before the budget counts it; the second get_price is
    # over budget and blocked although the cache (trylast) holds its answer
    await agent.session("s").chat("go", body={"read_only": True})
    first, second, third = tool_outputs(model)
    assert first == {"item": "tea", "price": 11}
    assert second.startswith('Tool "set_price" was blocked: this session is in read-only mode')
    assert third.startswith('Tool "get_price" was blocked: the budget of 1 tool call(s) per turn')
    assert tools.ran == Counter({"get_price": 1})
    assert plugin(agent, "tool_cache").stats.hits == 0
