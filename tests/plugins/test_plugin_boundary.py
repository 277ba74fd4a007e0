"""The typed plugin boundary: the session a hook sees (``SessionView``), the turn's ``body`` on
the contexts, ``StepResult.tool_results`` as ``StepToolResult`` models, tool-part states."""

from __future__ import annotations

from typing import Any, get_args

from tests.support.agents import make_agent
from think_core import (
    ChunkContext,
    SessionView,
    StepResult,
    StepToolResult,
    ToolCallContext,
    ToolCallResultContext,
    ToolPartState,
    TurnContext,
    hookimpl,
    tool,
)
from think_core.agent import Think
from think_core.messages import PENDING_TOOL_STATES, SETTLED_TOOL_STATES
from think_core.models.scripted import ScriptedModel, Step, call
from think_plugins.readonly import ReadOnlyGuard


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool
def fail(key: str) -> str:
    """Always fails."""
    raise RuntimeError(f"cannot {key}")


class BodyWatcher:
    """Records the ``body`` and ``session`` every tool-call hook (and tool-result chunk) saw."""

    name = "body_watcher"

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.sessions: list[object] = []
        self.steps: list[StepResult] = []

    @hookimpl
    def before_turn(self, ctx: TurnContext) -> None:
        self.seen.append(("before_turn", ctx.body))
        self.sessions.append(ctx.session)

    @hookimpl
    async def before_tool_call(self, ctx: ToolCallContext) -> None:
        self.seen.append(("before_tool_call", ctx.body))
        self.sessions.append(ctx.session)

    @hookimpl
    def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        self.seen.append(("after_tool_call", ctx.body))

    @hookimpl
    def on_chunk(self, ctx: ChunkContext) -> None:
        if ctx.chunk.type == "tool-result":
            self.seen.append(("on_chunk", ctx.body))

    @hookimpl
    def on_step_finish(self, ctx: StepResult) -> None:
        self.steps.append(ctx)


def boundary_agent(model: ScriptedModel, *plugins: Any) -> Think:
    return make_agent(model, tools=[lookup, fail], plugins=plugins)


async def test_tool_call_hooks_see_the_turns_body_and_the_live_session() -> None:
    watcher = BodyWatcher()
    agent = boundary_agent(ScriptedModel([Step(tool_calls=[call("lookup", {"key": "a"})]), "done"]), watcher)
    session = agent.session("s")
    body = {"mode": "audit", "n": 1}
    assert (await session.chat("go", body=body)).status == "completed"
    assert watcher.seen == [
        ("before_turn", body),
        ("before_tool_call", body),
        ("after_tool_call", body),
        ("on_chunk", body),
    ]
    assert all(seen is session for seen in watcher.sessions)  # passed through, never copied
    assert isinstance(session, SessionView)


async def test_a_turn_without_a_body_shows_none() -> None:
    watcher = BodyWatcher()
    agent = boundary_agent(ScriptedModel([Step(tool_calls=[call("lookup", {"key": "a"})]), "done"]), watcher)
    await agent.session("s").chat("go")
    assert {body for _, body in watcher.seen} == {None}


async def test_step_results_list_each_settled_call_as_a_model() -> None:
    watcher = BodyWatcher()
    model = ScriptedModel(
        [Step(tool_calls=[call("lookup", {"key": "a"}, id="c1"), call("fail", {"key": "b"}, id="c2")]), "done"]
    )
    await boundary_agent(model, watcher).session("s").chat("go")
    first = watcher.steps[0].tool_results
    assert all(isinstance(result, StepToolResult) for result in first)
    by_id = {result.tool_call_id: result for result in first}
    assert by_id["c1"] == StepToolResult(tool_call_id="c1", tool_name="lookup", output="value of a")
    assert by_id["c2"].tool_name == "fail" and by_id["c2"].output is None
    assert by_id["c2"].error is not None and "cannot b" in by_id["c2"].error
    assert watcher.steps[1].tool_results == []


def test_tool_results_accept_dicts_on_construction_and_assignment() -> None:
    row = {"tool_call_id": "c1", "tool_name": "lookup", "output": {"x": 1}, "error": None}
    step = StepResult(session=None, request_id="r", step_number=0, tool_results=[row])
    assert step.tool_results == [StepToolResult(**row)]
    step.tool_results = [{**row, "tool_call_id": "c2", "output": None, "error": "boom"}]  # type: ignore[list-item]
    assert step.tool_results == [StepToolResult(tool_call_id="c2", tool_name="lookup", error="boom")]


def test_the_session_is_not_validated_or_copied() -> None:
    class Opaque:
        pass

    opaque = Opaque()
    ctx = ToolCallContext(
        session=opaque, request_id="r", step_number=0, tool_call_id="c", tool_name="t",  # type: ignore[arg-type]
        input={}, tool=None, messages=[],
    )
    assert ctx.session is opaque and ctx.body is None


def test_tool_part_states_are_the_ai_sdk_states() -> None:
    assert set(get_args(ToolPartState)) == PENDING_TOOL_STATES | SETTLED_TOOL_STATES | {"input-streaming"}


class _BareSession:
    """Only what ``SessionView`` promises: no ``turn_body`` or any other engine internals."""

    id = "bare"
    settings: dict[str, Any] = {}
    state: dict[str, Any] = {}

    def __init__(self) -> None:
        self.private: dict[str, dict[str, Any]] = {}

    def state_for(self, plugin: object) -> dict[str, Any]:
        return self.private.setdefault(str(id(plugin)), {})


def test_the_read_only_guard_needs_only_the_session_view_and_the_body() -> None:
    session = _BareSession()
    assert isinstance(session, SessionView)

    def ctx(body: dict[str, Any] | None) -> ToolCallContext:
        return ToolCallContext(
            session=session, request_id="r", body=body, step_number=0, tool_call_id="c",
            tool_name="fail", input={"key": "k"}, tool=fail, messages=[],
        )

    guard = ReadOnlyGuard()
    assert guard.before_tool_call(ctx(None)) is None
    decision = guard.before_tool_call(ctx({"read_only": True}))
    assert decision is not None and decision.action == "block"
    assert decision.reason is not None and 'Tool "fail" was blocked' in decision.reason


class EveryHookBody:
    """Records the ``body`` of every context a turn hands to a plugin, failure hooks included."""

    def __init__(self) -> None:
        self.seen: dict[str, set[Any]] = {}

    def _saw(self, hook: str, body: Any) -> None:
        self.seen.setdefault(hook, set()).add(None if body is None else tuple(sorted(body.items())))

    @hookimpl
    def before_step(self, ctx: Any) -> None:
        self._saw("before_step", ctx.body)

    @hookimpl
    def on_chunk(self, ctx: ChunkContext) -> None:
        self._saw("on_chunk", ctx.body)

    @hookimpl
    def on_step_finish(self, ctx: StepResult) -> None:
        self._saw("on_step_finish", ctx.body)

    @hookimpl
    def classify_chat_error(self, error: BaseException, ctx: Any) -> None:
        self._saw("classify_chat_error", ctx.body)

    @hookimpl
    def on_chat_error(self, error: BaseException, ctx: Any) -> None:
        self._saw("on_chat_error", ctx.body)

    @hookimpl
    def on_chat_response(self, result: Any) -> None:
        self._saw("on_chat_response", result.body)


async def test_every_context_of_a_turn_carries_its_body_failures_included() -> None:
    watcher = EveryHookBody()
    agent = boundary_agent(ScriptedModel(["hello", Step(text="par", error=RuntimeError("boom"), error_after_output=True)]), watcher)
    session = agent.session("s")
    body = {"mode": "audit"}
    assert (await session.chat("one", body=body)).status == "completed"
    assert (await session.chat("two", body=body)).status == "error"
    hooks = ("before_step", "on_chunk", "on_step_finish", "classify_chat_error", "on_chat_error", "on_chat_response")
    for hook in hooks:
        assert watcher.seen.get(hook) == {(("mode", "audit"),)}, hook
