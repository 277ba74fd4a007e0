"""The analytics plugin (think_plugins.analytics) and ``think analytics report``.

Turns run for real with the scripted model; the HTTP sink talks to a real loopback collector
(tests/loopback.py: asyncio server on 127.0.0.1, port 0), never a patched client.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.loopback import LoopbackServer, Reply
from tests.support.agents import make_agent
from tests.support.net import closed_port
from think_core import ConfigurationError, TurnConfig, Usage, block, hookimpl, substitute, tool
from think_core.agent import Think
from think_core.cli import main
from think_core.models.scripted import ScriptedModel, Step, call
from think_plugins.analytics import Analytics, DataPoint, read_jsonl_points, read_sqlite_points
from think_plugins.analytics.report import OUTCOMES, percentile, summarize

LOGGER = "think.plugins.analytics"


@tool(read_only=True)
def lookup(q: str) -> str:
    """Look something up."""
    return f"answer to {q}"


@tool
def wipe() -> str:
    """Would wipe something."""
    return "wiped"


@tool
def broken() -> str:
    """Always fails."""
    raise RuntimeError("kaput")


@tool(read_only=True)
def cached() -> dict[str, int]:
    """Answered by a substitution."""
    raise AssertionError("never runs: substituted")


class Decider:
    """Blocks ``wipe`` and substitutes ``cached`` (as a cache hit would)."""

    name = "decider"

    @hookimpl
    def before_tool_call(self, ctx):
        if ctx.tool_name == "wipe":
            return block("no wiping")
        if ctx.tool_name == "cached":
            return substitute({"n": 42})
        return None


def four_outcomes(delay: float = 0.0) -> ScriptedModel:
    """One step with a call of each outcome, then an answer."""
    return ScriptedModel(
        [
            Step(
                tool_calls=[call("lookup", {"q": "x"}), call("wipe"), call("broken"), call("cached")],
                usage=Usage(input_tokens=10, output_tokens=5, total_tokens=15),
            ),
            Step(text="all done now", usage=Usage(input_tokens=20, output_tokens=3, total_tokens=23)),
        ],
        delay=delay,
        model_id="scripted-x",
    )


def analytics_agent(model: ScriptedModel, *plugins: Any, settings: dict | None = None) -> Think:
    return make_agent(model, tools=[lookup, wipe, broken, cached], plugins=plugins, settings=settings)


_created: list[Analytics] = []


class TrackedAnalytics(Analytics):
    """Analytics that registers itself, so a test can wait for its background writes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _created.append(self)


async def drain(agent: Think) -> None:
    """Sinks are written in the background after a turn: wait for that before reading them."""
    for plugin in agent.plugin_manager.get_plugins():
        if isinstance(plugin, Analytics):
            await plugin.drain()


async def drain_all() -> None:
    while _created:
        await _created.pop().drain()


def by_kind(points: list[DataPoint], kind: str) -> list[DataPoint]:
    return [p for p in points if p["kind"] == kind]


# -- recording --------------------------------------------------------------------------------


async def test_sqlite_sink_records_every_outcome_steps_and_the_turn(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    plugin = TrackedAnalytics()
    agent = analytics_agent(four_outcomes(delay=0.005), Decider(), plugin, settings={"analytics": {"path": str(db)}})
    result = await agent.session("sess-1").chat("go")
    await drain(agent)
    assert result.status == "completed"

    points = read_sqlite_points(db)
    tools = {p["blobs"][0]: p for p in by_kind(points, "tool_call")}
    assert {name: p["blobs"][1] for name, p in tools.items()} == {
        "lookup": "executed", "wipe": "blocked", "broken": "failed", "cached": "substituted",
    }
    assert tools["lookup"]["doubles"][0] == len(json.dumps("answer to x"))
    assert tools["wipe"]["doubles"][0] == len(json.dumps("no wiping"))
    assert tools["cached"]["doubles"][0] == len(json.dumps({"n": 42}))
    assert all(p["doubles"][1] >= 0 for p in tools.values())
    assert all(p["indexes"] == ["sess-1"] for p in points)
    assert {p["request_id"] for p in points} == {result.request_id}

    steps = by_kind(points, "step")
    assert [s["doubles"][:3] for s in steps] == [[10, 5, 15], [20, 3, 23]]
    assert [s["doubles"][5] for s in steps] == [0, 1]
    assert steps[0]["blobs"][1] == "scripted-x"

    (turn,) = by_kind(points, "turn")
    assert turn["blobs"] == ["completed", ""]
    assert turn["doubles"][1:] == [30, 8, 38]
    assert turn["doubles"][0] >= 15  # "all done now": 3 pieces x 5 ms, at least
    assert plugin.written == len(points) == 7 and plugin.dropped == 0


async def test_jsonl_sink(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    agent = analytics_agent(four_outcomes(), Decider(), TrackedAnalytics({"sink": "jsonl", "path": str(path)}))
    await agent.session("s").chat("go")
    await drain(agent)
    points = read_jsonl_points(path)
    assert [p["kind"] for p in points] == ["tool_call"] * 4 + ["step", "step", "turn"]
    assert sorted(p["blobs"][1] for p in by_kind(points, "tool_call")) == [
        "blocked", "executed", "failed", "substituted",
    ]


async def test_error_turn_is_recorded_with_its_status(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    model = ScriptedModel([Step(error=RuntimeError("model exploded"))])
    result = await analytics_agent(model, TrackedAnalytics({"path": str(db)})).session("s").chat("go")
    await drain_all()
    assert result.status == "error"
    (turn,) = by_kind(read_sqlite_points(db), "turn")
    assert turn["blobs"][0] == "error"
    assert "model exploded" in turn["blobs"][1]


async def test_latency_survives_a_hidden_before_turn(tmp_path: Path) -> None:
    """Another plugin's before_turn decision hides ours; before_step still starts the clock."""

    class DecidesTurn:
        name = "decides_turn"

        @hookimpl(tryfirst=True)
        def before_turn(self, ctx):
            return TurnConfig(max_steps=3)

    db = tmp_path / "a.db"
    model = ScriptedModel(["one two three four five six"], delay=0.01)
    await analytics_agent(model, TrackedAnalytics({"path": str(db)}), DecidesTurn()).session("s").chat("go")
    await drain_all()
    (turn,) = by_kind(read_sqlite_points(db), "turn")
    assert turn["doubles"][0] >= 60


class CrashingSink:
    background = False

    def __init__(self) -> None:
        self.calls = 0

    async def write(self, points: list[DataPoint]) -> None:
        self.calls += 1
        raise OSError("sink is on fire")

    async def aclose(self) -> None:
        return None


async def test_a_crashing_sink_never_fails_a_turn(caplog: pytest.LogCaptureFixture) -> None:
    sink = CrashingSink()
    plugin = TrackedAnalytics(sink=sink)
    result = await analytics_agent(four_outcomes(), Decider(), plugin).session("s").chat("go")
    await drain_all()
    assert result.status == "completed" and result.text == "all done now"
    assert sink.calls == 1
    assert plugin.dropped == 7 and plugin.queued == 0
    assert any(
        r.name == LOGGER and r.levelno == logging.WARNING and "sink is on fire" in r.getMessage()
        for r in caplog.records
    )


async def test_unwritable_sqlite_path_never_fails_a_turn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plugin = TrackedAnalytics({"path": str(tmp_path / "missing-dir" / "a.db")})
    result = await analytics_agent(four_outcomes(), Decider(), plugin).session("s").chat("go")
    await drain_all()
    assert result.status == "completed"
    assert plugin.dropped == 7
    assert any("dropped 7 data point(s)" in r.getMessage() for r in caplog.records if r.name == LOGGER)


# -- the HTTP sink against a real loopback collector ---------------------------------------------


@pytest_asyncio.fixture
async def collector() -> AsyncIterator[LoopbackServer]:
    async with LoopbackServer(handler=lambda request: Reply.json({"ok": True})) as server:
        yield server


def http_settings(url: str, **extra: Any) -> dict[str, Any]:
    return {"sink": "http", "url": url, "backoff_seconds": 0.01, "max_backoff_seconds": 0.05, **extra}


async def test_http_sink_retries_a_failed_post_then_delivers(collector: LoopbackServer) -> None:
    collector.enqueue(Reply(status=503))
    plugin = TrackedAnalytics(http_settings(collector.url + "/ingest", headers={"authorization": "Bearer t"}))
    try:
        result = await analytics_agent(four_outcomes(), Decider(), plugin).session("s").chat("go")
        await drain_all()
        assert result.status == "completed"
        await plugin.flush()
    finally:
        await plugin.aclose()
    assert len(collector.requests) == 2  # the 503, then the retry
    first, second = collector.requests
    assert first.body == second.body
    assert second.method == "POST" and second.path == "/ingest"
    assert second.headers["authorization"] == "Bearer t"
    points = second.json["points"]
    assert [p["kind"] for p in points] == ["tool_call"] * 4 + ["step", "step", "turn"]
    assert plugin.written == 7 and plugin.dropped == 0


async def test_http_sink_never_makes_the_turn_wait(collector: LoopbackServer) -> None:
    collector.enqueue(Reply(status=200, delay=0.3))
    plugin = TrackedAnalytics(http_settings(collector.url))
    try:
        result = await analytics_agent(four_outcomes(), Decider(), plugin).session("s").chat("go")
        assert result.status == "completed"
        assert plugin.written == 0  # still on its way
        await plugin.drain()
        assert plugin.written == 7
    finally:
        await plugin.aclose()


async def test_http_sink_batches(collector: LoopbackServer) -> None:
    plugin = TrackedAnalytics(http_settings(collector.url, batch_size=3))
    try:
        await analytics_agent(four_outcomes(), Decider(), plugin).session("s").chat("go")
        await drain_all()
        await plugin.flush()
    finally:
        await plugin.aclose()
    sizes = [len(r.json["points"]) for r in collector.requests]
    assert sum(sizes) == 7 and max(sizes) <= 3


async def test_down_collector_drops_points_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    plugin = TrackedAnalytics(http_settings(f"http://127.0.0.1:{closed_port()}/ingest", max_retries=2))
    try:
        result = await analytics_agent(four_outcomes(), Decider(), plugin).session("s").chat("go")
        await drain_all()
        assert result.status == "completed" and result.text == "all done now"
        await plugin.flush()
    finally:
        await plugin.aclose()
    assert plugin.dropped == 7 and plugin.written == 0
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert any("dropped 7 data point(s)" in m and "after 3 attempt(s)" in m for m in warnings)


async def test_collector_refusing_a_batch_is_not_retried(
    collector: LoopbackServer, caplog: pytest.LogCaptureFixture
) -> None:
    collector.enqueue(Reply.json({"error": "bad"}, status=400))
    plugin = TrackedAnalytics(http_settings(collector.url))
    try:
        await analytics_agent(four_outcomes(), Decider(), plugin).session("s").chat("go")
        await drain_all()
        await plugin.flush()
    finally:
        await plugin.aclose()
    assert len(collector.requests) == 1 and plugin.dropped == 7
    assert any("refused the batch: HTTP 400" in r.getMessage() for r in caplog.records if r.name == LOGGER)


async def test_full_queue_drops_the_oldest_with_a_warning(
    collector: LoopbackServer, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = TrackedAnalytics(http_settings(collector.url, max_queue=3))
    try:
        await analytics_agent(four_outcomes(), Decider(), plugin).session("s").chat("go")
        await drain_all()
        await plugin.flush()
    finally:
        await plugin.aclose()
    delivered = [p for r in collector.requests for p in r.json["points"]]
    assert [p["kind"] for p in delivered] == ["step", "step", "turn"]
    assert plugin.dropped == 4
    queue_warnings = [r for r in caplog.records if r.name == LOGGER and "queue full" in r.getMessage()]
    assert len(queue_warnings) == 1


def test_http_sink_needs_a_url() -> None:
    with pytest.raises(ConfigurationError, match="'analytics'.*url"):
        Think(ScriptedModel([]), plugins=[TrackedAnalytics()], load_entrypoints=False, settings={"analytics": {"sink": "http"}})


def test_unknown_setting_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="'analytics'.*snk"):
        Think(ScriptedModel([]), plugins=[TrackedAnalytics()], load_entrypoints=False, settings={"analytics": {"snk": "x"}})


# -- the report ---------------------------------------------------------------------------------


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0], 95) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0


def point(kind: str, blobs: list[str], doubles: list[float]) -> DataPoint:
    return DataPoint(kind=kind, timestamp=0.0, request_id="r", blobs=blobs, doubles=doubles, indexes=["s"])  # type: ignore[typeddict-item]


def test_summarize() -> None:
    points = [
        point("tool_call", ["a", "executed"], [1, 10]),
        point("tool_call", ["a", "executed"], [1, 30]),
        point("tool_call", ["a", "failed"], [1, 20]),
        point("tool_call", ["a", "substituted"], [1, 0]),
        point("tool_call", ["b", "blocked"], [1, 0]),
        point("turn", ["completed", ""], [100, 10, 5, 15]),
        point("turn", ["error", "x"], [-1, 20, 5, 25]),
    ]
    summary = summarize(points)
    a, b = summary["tools"]
    assert a == {
        "tool": "a", "calls": 4, "executed": 2, "blocked": 0, "substituted": 1, "failed": 1,
        "error_rate": 0.25, "p50_ms": 20, "p95_ms": 30,
    }
    assert (b["calls"], b["blocked"], b["p50_ms"]) == (1, 1, None)
    assert summary["turns"] == {
        "total": 2, "by_status": {"completed": 1, "error": 1},
        "latency_p50_ms": 100, "latency_p95_ms": 100,
        "tokens_per_turn": {"input": 15.0, "output": 5.0, "total": 20.0},
    }
    assert summary["cache"] == {"hits": 1, "lookups": 4, "hit_rate": 0.25}


@pytest.fixture
def report_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """``think analytics report`` is the analytics plugin's command: allow that entry point (the
    suite's hermetic default, ``THINK_PLUGINS=""``, allows none, so no plugin adds commands)."""
    monkeypatch.setenv("THINK_PLUGINS", "analytics")


async def test_report_command_reads_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], report_command: None
) -> None:
    db = tmp_path / "a.db"
    agent = analytics_agent(four_outcomes(), Decider(), TrackedAnalytics({"path": str(db)}))
    await agent.session("s").chat("go")
    await drain(agent)

    assert main(["analytics", "report", "--db", str(db), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {t["tool"]: t["calls"] for t in summary["tools"]} == {"broken": 1, "cached": 1, "lookup": 1, "wipe": 1}
    assert {t["tool"]: t["error_rate"] for t in summary["tools"]}["broken"] == 1.0
    assert summary["turns"]["by_status"] == {"completed": 1}
    assert summary["turns"]["tokens_per_turn"]["total"] == 38
    assert summary["cache"] == {"hits": 1, "lookups": 3, "hit_rate": pytest.approx(1 / 3)}

    assert main(["analytics", "report", "--db", str(db)]) == 0
    table = capsys.readouterr().out
    for text in ("lookup", "broken", "cache hit rate", "33.3%", "turns completed"):
        assert text in table


def test_report_command_on_a_missing_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], report_command: None
) -> None:
    missing = tmp_path / "nope.db"
    assert main(["analytics", "report", "--db", str(missing)]) == 1
    assert "no analytics database" in capsys.readouterr().err
    assert not missing.exists()


async def test_report_command_reads_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], report_command: None
) -> None:
    path = tmp_path / "a.jsonl"
    await analytics_agent(four_outcomes(), Decider(), TrackedAnalytics({"sink": "jsonl", "path": str(path)})).session("s").chat("go")
    await drain_all()
    assert main(["analytics", "report", "--jsonl", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["turns"]["total"] == 1


def tool_point(tool: str, outcome: str, ms: float) -> dict[str, Any]:
    return {"kind": "tool_call", "timestamp": 0.0, "request_id": "r", "blobs": [tool, outcome],
            "doubles": [0.0, ms], "indexes": [tool]}


def test_report_tables_fit_80_columns_without_breaking_a_word(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, report_command: None
) -> None:
    """The report as rich renders it on an 80-column terminal (rich reads COLUMNS): no line is
    wider, and every header, number and tool name of a realistic length is on one line, whole.
    (One nine-column table used to break them: "subs/titu/ted", "100./0%".)"""
    name = "lookup_customer_record_x"  # 24 characters: fits its column
    points = [tool_point(name, "executed", 123456.7) for _ in range(10)]
    points += [tool_point(name, outcome, 1.0) for outcome in ("blocked", "substituted")]
    points += [tool_point("wipe", "failed", 99999.9)]
    points.append({"kind": "turn", "timestamp": 0.0, "request_id": "r", "blobs": ["completed"],
                   "doubles": [123456.7, 1000.0, 20000.0, 21000.0], "indexes": []})
    path = tmp_path / "wide.jsonl"
    path.write_text("".join(json.dumps(point) + "\n" for point in points))
    monkeypatch.setenv("COLUMNS", "80")

    assert main(["analytics", "report", "--jsonl", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()

    assert max(map(len, lines)) <= 80, "\n".join(lines)
    words = [line.split() for line in lines]
    assert ["tool", "calls", *OUTCOMES] in words
    assert any(" ".join(w) == "tool error rate p50 ms p95 ms" for w in words)
    assert [name, "12", "10", "1", "1", "0"] in words
    assert [name, "0.0%", "123456.7", "123456.7"] in words
    assert ["wipe", "100.0%", "99999.9", "99999.9"] in words
    assert ["tokens", "per", "turn", "(in", "/", "out", "/", "total)", "1000.0", "/", "20000.0", "/", "21000.0"] in words


async def test_sqlite_sink_never_makes_the_turn_wait(tmp_path: Path) -> None:
    """A locked analytics database delays only the background write, never the turn."""
    import sqlite3

    db = tmp_path / "locked.db"
    plugin = TrackedAnalytics({"path": str(db)})
    agent = analytics_agent(four_outcomes(), Decider(), plugin)
    await agent.session("warm").chat("go")  # creates the schema
    await plugin.drain()
    locker = sqlite3.connect(db)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        result = await analytics_agent(four_outcomes(), Decider(), plugin).session("s").chat("go")
        assert result.status == "completed"
        assert plugin.written == 7  # the second turn's points are still waiting for the lock
    finally:
        locker.rollback()
        locker.close()
    await plugin.drain()
    assert plugin.written == 14
