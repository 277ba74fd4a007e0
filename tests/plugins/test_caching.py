"""The tool cache (think_plugins.caching) through real turns with the scripted model."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import make_agent
from tests.support.scripted import tool_outputs
from think_core import ConfigurationError, allow, block, hookimpl, substitute, tool
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call
from think_plugins.caching import ToolCache, ToolCacheSettings, cache_key


class Tools:
    """Tools with every annotation the cache cares about; ``ran`` counts real executions."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()
        self.fail_next = False

        @tool(read_only=True)
        async def read_file(path: str, encoding: str = "utf-8") -> dict[str, str]:
            """Read a file."""
            self.ran["read_file"] += 1
            if self.fail_next:
                self.fail_next = False
                raise OSError("disk on fire")
            return {"path": path, "text": f"contents of {path} #{self.ran['read_file']}"}

        @tool(read_only=True)
        async def slow_read(path: str) -> str:
            """A read that takes a while."""
            self.ran["slow_read"] += 1
            await asyncio.sleep(0.05)
            return f"slow {path} #{self.ran['slow_read']}"

        @tool(idempotent=True)
        def put_setting(key: str, value: str) -> str:
            """Set a value (idempotent: the same call twice changes nothing more)."""
            self.ran["put_setting"] += 1
            return f"{key}={value}"

        @tool(destructive=True)
        def delete_file(path: str) -> str:
            """Delete a file."""
            self.ran["delete_file"] += 1
            return f"deleted {path}"

        @tool
        def send_email(to: str) -> str:
            """Unannotated: may change anything."""
            self.ran["send_email"] += 1
            return f"sent to {to}"

        @tool(read_only=True)
        def measure() -> dict[str, float]:
            """Returns a NaN: not strict JSON."""
            self.ran["measure"] += 1
            return {"value": float("nan")}

        self.all = [read_file, slow_read, put_setting, delete_file, send_email, measure]


def steps(*calls: tuple[str, dict[str, Any]]) -> ScriptedModel:
    """One step per call, then a final answer."""
    return ScriptedModel([*(Step(tool_calls=[call(name, args)]) for name, args in calls), "done"])


def caching_agent(model: ScriptedModel, tools: Tools, *plugins: Any, settings: dict | None = None) -> Think:
    return make_agent(model, tools=tools.all, plugins=plugins, settings=settings)


READ_A = ("read_file", {"path": "a"})


async def test_read_only_result_is_served_from_cache_the_second_time() -> None:
    tools, cache = Tools(), ToolCache()
    model = steps(READ_A, READ_A)
    result = await caching_agent(model, tools, cache).session("s").chat("go")
    assert result.status == "completed"
    assert tools.ran["read_file"] == 1
    first, second = tool_outputs(model)
    assert first == second == {"path": "a", "text": "contents of a #1"}
    assert (cache.stats.hits, cache.stats.misses, cache.stats.stores) == (1, 1, 1)


async def test_key_is_canonical_and_distinguishes_inputs() -> None:
    assert cache_key("t", {"b": 2, "a": 1}) == cache_key("t", {"a": 1, "b": 2}) == 't\n{"a":1,"b":2}'
    tools, cache = Tools(), ToolCache()
    model = steps(
        ("read_file", {"path": "a", "encoding": "latin-1"}),
        ("read_file", {"encoding": "latin-1", "path": "a"}),
        ("read_file", {"path": "b", "encoding": "latin-1"}),
    )
    await caching_agent(model, tools, cache).session("s").chat("go")
    assert tools.ran["read_file"] == 2
    assert [o["text"] for o in tool_outputs(model)] == ["contents of a #1", "contents of a #1", "contents of b #2"]


async def test_idempotent_tool_is_cached_and_unannotated_tool_is_not() -> None:
    tools, cache = Tools(), ToolCache()
    put = ("put_setting", {"key": "k", "value": "v"})
    mail = ("send_email", {"to": "x"})
    await caching_agent(steps(put, put, mail, mail), tools, cache).session("s").chat("go")
    assert tools.ran["put_setting"] == 1
    assert tools.ran["send_email"] == 2


async def test_allow_listed_tool_is_cached_and_does_not_invalidate() -> None:
    tools, cache = Tools(), ToolCache()
    mail = ("send_email", {"to": "x"})
    model = steps(READ_A, mail, mail, READ_A)
    await caching_agent(model, tools, cache, settings={"tool_cache": {"allow": ["send_email"]}}).session("s").chat("go")
    assert tools.ran == Counter({"read_file": 1, "send_email": 1})
    assert cache.stats.invalidations == 0


async def test_mutating_call_invalidates() -> None:
    tools, cache = Tools(), ToolCache()
    model = steps(READ_A, ("delete_file", {"path": "z"}), READ_A, READ_A)
    await caching_agent(model, tools, cache).session("s").chat("go")
    assert tools.ran["read_file"] == 2
    assert [o["text"] for o in tool_outputs(model) if isinstance(o, dict)] == [
        "contents of a #1", "contents of a #2", "contents of a #2",
    ]
    assert cache.stats.invalidations == 1


class Blocker:
    """Blocks the named tools (registered after the cache, so pluggy asks it first)."""

    name = "blocker"

    def __init__(self, *names: str) -> None:
        self.names = set(names)

    @hookimpl
    def before_tool_call(self, ctx):
        return block("nope") if ctx.tool_name in self.names else None


async def test_blocked_mutating_call_does_not_invalidate() -> None:
    tools, cache = Tools(), ToolCache()
    model = steps(READ_A, ("delete_file", {"path": "z"}), READ_A)
    await caching_agent(model, tools, cache, Blocker("delete_file")).session("s").chat("go")
    assert tools.ran == Counter({"read_file": 1})
    assert cache.stats.invalidations == 0


async def test_failed_mutating_call_still_invalidates() -> None:
    @tool(destructive=True)
    def explode() -> str:
        """Half-deletes, then fails."""
        raise RuntimeError("half done")

    tools, cache = Tools(), ToolCache()
    tools.all.append(explode)
    model = steps(READ_A, ("explode", {}), READ_A)
    await caching_agent(model, tools, cache).session("s").chat("go")
    assert tools.ran["read_file"] == 2
    assert cache.stats.invalidations == 1


async def test_failed_call_is_not_stored() -> None:
    tools, cache = Tools(), ToolCache()
    tools.fail_next = True
    model = steps(READ_A, READ_A, READ_A)
    await caching_agent(model, tools, cache).session("s").chat("go")
    assert tools.ran["read_file"] == 2  # failed, executed (stored), hit
    assert cache.stats.stores == 1 and cache.stats.hits == 1


class LateDecider:
    """Decides after the cache looked: trylast and registered after the cache (pluggy calls
    the trylast implementations in registration order)."""

    name = "late_decider"

    def __init__(self) -> None:
        self.decision: Any = None

    @hookimpl(trylast=True)
    def before_tool_call(self, ctx):
        decision, self.decision = self.decision, None
        return decision


@pytest.mark.parametrize("decision", [block("blocked late"), substitute({"fake": True})])
async def test_blocked_or_substituted_results_are_not_stored(decision: Any) -> None:
    tools, cache, late = Tools(), ToolCache(), LateDecider()
    late.decision = decision
    model = steps(READ_A, READ_A)
    await caching_agent(model, tools, cache, late).session("s").chat("go")
    assert cache.stats.misses == 2 and cache.stats.hits == 0 and cache.stats.stores == 1
    assert tools.ran["read_file"] == 1
    assert tool_outputs(model)[1] == {"path": "a", "text": "contents of a #1"}


async def test_input_rewritten_by_another_plugin_is_never_stored() -> None:
    class Rewriter:
        name = "rewriter"
        armed = True

        @hookimpl
        def before_tool_call(self, ctx):
            if self.armed:
                self.armed = False
                return allow(input={"path": "secret"})
            return None

    tools, cache = Tools(), ToolCache()
    model = steps(READ_A, READ_A)
    await caching_agent(model, tools, cache, Rewriter()).session("s").chat("go")
    first, second = tool_outputs(model)
    assert first["path"] == "secret"
    assert second == {"path": "a", "text": "contents of a #2"}
    assert cache.stats.stores == 1


async def test_ttl_expiry_with_an_injected_clock() -> None:
    now = [1000.0]
    tools = Tools()
    cache = ToolCache(ToolCacheSettings(ttl_seconds=10), clock=lambda: now[0])

    def at(t: float, entry: Any) -> Any:
        def play(request: Any) -> Any:
            now[0] = t
            return entry
        return play

    read = Step(tool_calls=[call("read_file", {"path": "a"})])
    model = ScriptedModel([at(1000, read), at(1009.9, read), at(1010.0, read), "done"])
    await caching_agent(model, tools, cache).session("s").chat("go")
    assert tools.ran["read_file"] == 2
    assert cache.stats.expirations == 1 and cache.stats.hits == 1


async def test_no_ttl_keeps_entries() -> None:
    now = [0.0]
    tools = Tools()
    cache = ToolCache({"ttl_seconds": None}, clock=lambda: now[0])
    read = Step(tool_calls=[call("read_file", {"path": "a"})])

    def later(request: Any) -> Step:
        now[0] = 10**9
        return read

    await caching_agent(ScriptedModel([read, later, "done"]), tools, cache).session("s").chat("go")
    assert tools.ran["read_file"] == 1


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_lru_eviction(backend: str, tmp_path: Path) -> None:
    tools = Tools()
    settings = {"max_entries": 2, "backend": backend, "path": str(tmp_path / "c.db")}
    if backend == "memory":
        del settings["path"]
    cache = ToolCache(settings)
    paths = ["a", "b", "a", "c", "a", "b"]  # a,b stored; a hit; c evicts b; a hit; b again
    model = steps(*(("read_file", {"path": p}) for p in paths))
    await caching_agent(model, tools, cache).session("s").chat("go")
    assert [o["text"] for o in tool_outputs(model)] == [
        "contents of a #1", "contents of b #2", "contents of a #1",
        "contents of c #3", "contents of a #1", "contents of b #4",
    ]
    assert cache.stats.evictions == 2  # b (by c), then c (by b)
    assert cache.stats.hits == 2


async def test_output_that_is_not_strict_json_is_not_stored() -> None:
    """The engine hands observers strict JSON (NaN becomes null), so the cache's own guard is
    exercised here by calling its hooks as the engine would, with a NaN output."""
    from think_core import ToolCallContext, ToolCallResultContext

    tools, cache = Tools(), ToolCache()
    agent = caching_agent(steps(), tools, cache)
    session = agent.session("s")
    measure = next(t for t in tools.all if t.name == "measure")
    common = dict(session=session, request_id="r1", step_number=0, tool_call_id="c1", tool_name="measure",
                  input={}, tool=measure, messages=[])
    assert await cache.before_tool_call(ToolCallContext(**common)) is None  # a miss
    await cache.after_tool_call(
        ToolCallResultContext(**common, success=True, output={"value": float("nan")}, decision="allow")
    )
    assert cache.stats.stores == 0


async def test_a_nan_output_reaches_the_model_as_null_and_is_cached_as_such() -> None:
    tools, cache = Tools(), ToolCache()
    model = steps(("measure", {}), ("measure", {}))
    await caching_agent(model, tools, cache).session("s").chat("go")
    assert tools.ran["measure"] == 1 and cache.stats.hits == 1
    assert tool_outputs(model)[:2] == [{"value": None}, {"value": None}]


async def test_result_racing_a_mutation_is_not_stored() -> None:
    """A slow read that started before a concurrent delete finished must not be stored."""
    tools, cache = Tools(), ToolCache()
    model = ScriptedModel(
        [
            Step(tool_calls=[call("slow_read", {"path": "a"}), call("delete_file", {"path": "a"})]),
            Step(tool_calls=[call("slow_read", {"path": "a"})]),
            "done",
        ]
    )
    await caching_agent(model, tools, cache).session("s").chat("go")
    assert tools.ran["slow_read"] == 2
    assert cache.stats.stores == 1  # only the second read, after the mutation


async def test_session_scope_isolates_sessions() -> None:
    tools, cache = Tools(), ToolCache({"scope": "session"})
    model = steps(READ_A)
    model.add(Step(tool_calls=[call(*READ_A)]), "done")
    model.add(Step(tool_calls=[call("delete_file", {"path": "x"})]), "done")
    model.add(Step(tool_calls=[call(*READ_A)]), "done")
    agent = caching_agent(model, tools, cache)
    await agent.session("one").chat("go")
    await agent.session("two").chat("go")  # other session: a miss
    assert tools.ran["read_file"] == 2
    await agent.session("two").chat("delete")  # invalidates session two only
    await agent.session("one").chat("go")  # still cached for session one
    assert tools.ran["read_file"] == 2
    assert cache.stats.hits == 1


async def test_global_scope_shares_across_sessions() -> None:
    tools, cache = Tools(), ToolCache()
    model = steps(READ_A)
    model.add(Step(tool_calls=[call(*READ_A)]), "done")
    agent = caching_agent(model, tools, cache)
    await agent.session("one").chat("go")
    await agent.session("two").chat("go")
    assert tools.ran["read_file"] == 1


async def test_sqlite_cache_is_shared_by_two_agents(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    settings = {"tool_cache": {"backend": "sqlite", "path": str(db)}}
    tools_a, tools_b = Tools(), Tools()
    model_a, model_b = steps(READ_A), steps(READ_A, ("delete_file", {"path": "z"}))
    cache_a, cache_b = ToolCache(), ToolCache()
    agent_a = caching_agent(model_a, tools_a, cache_a, settings=settings)
    await agent_a.session("s").chat("go")
    await caching_agent(model_b, tools_b, cache_b, settings=settings).session("s").chat("go")
    assert tools_a.ran["read_file"] == 1 and tools_b.ran["read_file"] == 0
    assert tool_outputs(model_b)[0] == {"path": "a", "text": "contents of a #1"}
    assert cache_b.stats.hits == 1 and cache_b.stats.invalidations == 1
    # agent b's delete emptied the shared file for agent a too
    model_a.add(Step(tool_calls=[call(*READ_A)]), "done")
    await agent_a.session("s").chat("again")
    assert tools_a.ran["read_file"] == 2
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT COUNT(*) FROM tool_cache").fetchone()[0] == 1
    conn.close()


async def test_constructor_settings_are_kept() -> None:
    cache = ToolCache(settings=ToolCacheSettings(allow=["send_email"]))
    tools = Tools()
    mail = ("send_email", {"to": "x"})
    await caching_agent(steps(mail, mail), tools, cache).session("s").chat("go")
    assert tools.ran["send_email"] == 1


@pytest.mark.parametrize(
    ("section", "field"),
    [({"backend": "sqlite"}, "path"), ({"ttl_seconds": 0}, "ttl_seconds"), ({"max_entry": 3}, "max_entry")],
)
def test_bad_settings_name_the_plugin_and_field(section: dict, field: str) -> None:
    with pytest.raises(ConfigurationError, match=f"'tool_cache'.*{field}"):
        Think(ScriptedModel([]), plugins=[ToolCache()], load_entrypoints=False, settings={"tool_cache": section})


async def test_an_idempotent_write_invalidates_what_reads_cached() -> None:
    """set(5), get, set(6), get: the second get must see 6, and set(5) again must really run."""
    from think_core import tool as make_tool

    state = {"value": 0, "sets": 0}

    @make_tool(idempotent=True)
    def set_value(value: int) -> str:
        """Set the value (idempotent, not read-only)."""
        state["value"] = value
        state["sets"] += 1
        return f"set {value}"

    @make_tool(read_only=True)
    def get_value() -> int:
        """Read the value."""
        return state["value"]

    class Both:
        all = [set_value, get_value]
        ran: dict = {}

    cache = ToolCache()
    model = steps(
        ("set_value", {"value": 5}), ("set_value", {"value": 5}), ("get_value", {}),
        ("set_value", {"value": 6}), ("get_value", {}), ("set_value", {"value": 5}), ("get_value", {}),
    )
    await caching_agent(model, Both(), cache).session("s").chat("go")
    assert tool_outputs(model) == ["set 5", "set 5", 5, "set 6", 6, "set 5", 5]
    assert state["sets"] == 3  # the immediate repeat of set(5) was served from the cache; the later one ran
