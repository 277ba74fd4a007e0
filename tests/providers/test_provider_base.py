"""The streaming-HTTP model base: a new provider is its defaults, a request body and an event mapping.

``ToyModel`` below speaks an invented protocol (``event: text`` / ``call`` / ``end``) and gets
keys, URLs, headers, retries, error bodies, stream checks and connection reuse from the base.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.loopback import LoopbackServer, Reply  # noqa: F401
from tests.support.wire import FAST, ask, collect
from think_core.agent import Think
from think_core.errors import ConfigurationError, ProviderError
from think_core.events import Finish, ModelEvent, TextDelta, ToolCall, Usage
from think_core.models import _wire
from think_core.models.base import ModelRequest, UserMessage
from think_core.models.http_model import NO_EVENTS, EventMapper, StreamingHTTPModel
from think_core.models.sse import SSEEvent

toy_reason = _wire.stop_reason_mapper({"done": "stop", "cut": "length", "tools": "tool-calls"})


class ToyModel(StreamingHTTPModel):
    provider = "toy"
    default_base_url = "https://toy.invalid"
    base_url_env = "TOY_BASE_URL"
    api_key_env = "TOY_API_KEY"
    path = "/v1/generate"

    def default_headers(self) -> dict[str, str]:
        return {"x-toy-key": self._api_key} if self._api_key else {}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        prompt = [m.content for m in request.messages if isinstance(m, UserMessage)]
        return {"model": self.model_id, "prompt": prompt, "stream": True}

    def event_mapper(self, request: ModelRequest) -> EventMapper:
        return ToyMapper(self.provider, self.model_id)


class ToyMapper(EventMapper):
    __slots__ = ("usage",)

    def __init__(self, provider: str, model_id: str) -> None:
        super().__init__(provider, model_id)
        self.usage = Usage()

    def on_event(self, sse: SSEEvent) -> Sequence[ModelEvent]:
        data = _wire.decode_json(sse.data)
        if sse.event == "text":
            return (TextDelta(data["t"]),)
        if sse.event == "call":
            raw = json.dumps(data["args"])
            return (ToolCall(data["id"], data["name"], _wire.parse_tool_input(raw), raw),)
        if sse.event == "end":
            self.done = True
            self.stop_reason = data["reason"]
            self.response_id = data.get("id")
            self.usage = Usage(input_tokens=data["in"], output_tokens=data["out"], total_tokens=data["in"] + data["out"])
        return NO_EVENTS

    def finish(self) -> Iterator[ModelEvent]:
        yield self.finish_event(toy_reason(self.stop_reason), self.usage, None)


def toy_stream(*texts: str, call: dict[str, Any] | None = None, reason: str = "done", end: bool = True) -> str:
    out = [f"event: text\ndata: {json.dumps({'t': t})}\n\n" for t in texts]
    if call is not None:
        out.append(f"event: call\ndata: {json.dumps(call)}\n\n")
    if end:
        out.append(f"event: end\ndata: {json.dumps({'reason': reason, 'in': 3, 'out': 4, 'id': 'r-1'})}\n\n")
    return "".join(out)


def toy(server: LoopbackServer, **kwargs: Any) -> ToyModel:
    kwargs.setdefault("api_key", "toy-secret")
    kwargs.setdefault("retry_policy", FAST)
    return ToyModel("toy-1", base_url=server.url, **kwargs)


async def test_a_new_provider_is_body_and_mapping(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(toy_stream("Hel", "lo", call={"id": "c1", "name": "f", "args": {"x": 1}}), chunk_size=5))
    events = await collect(toy(loopback, headers={"x-extra": "1"}, query={"v": "2"}), ask("Hello"))

    assert events[:3] == [TextDelta("Hel"), TextDelta("lo"), ToolCall("c1", "f", {"x": 1}, '{"x": 1}')]
    finish = events[-1]
    assert isinstance(finish, Finish) and len(events) == 4
    assert (finish.finish_reason, finish.response_id, finish.model_id) == ("stop", "r-1", "toy-1")
    assert finish.usage.total_tokens == 7
    sent = loopback.requests[0]
    assert sent.path == "/v1/generate?v=2"
    assert sent.json == {"model": "toy-1", "prompt": ["Hello"], "stream": True}
    assert sent.headers["x-toy-key"] == "toy-secret" and "authorization" not in sent.headers
    assert sent.headers["x-extra"] == "1" and sent.headers["accept"] == "text/event-stream"


async def test_per_call_headers_and_provider_name(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(toy_stream("ok")))
    model = toy(loopback, provider="toy-compatible")
    await collect(model, ask(settings={"headers": {"x-call": "yes"}}))
    assert model.provider == "toy-compatible" and ToyModel.provider == "toy"
    assert loopback.requests[0].headers["x-call"] == "yes"


async def test_the_base_retries_before_output_only(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json({"error": {"message": "busy", "type": "overloaded"}}, status=503), Reply.sse(toy_stream("ok")))
    assert [e.text for e in await collect(toy(loopback), ask()) if isinstance(e, TextDelta)] == ["ok"]
    assert len(loopback.requests) == 2

    loopback.enqueue(Reply.sse(toy_stream("partial", end=False), disconnect_after=1))
    with pytest.raises((ProviderError, httpx.HTTPError)):
        await collect(toy(loopback), ask())
    assert len(loopback.requests) == 3  # output was seen: no second attempt


async def test_error_status_becomes_a_provider_error_with_the_providers_name(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json({"error": {"message": "no such model", "code": "model_not_found"}}, status=404))
    with pytest.raises(ProviderError) as caught:
        await collect(toy(loopback), ask())
    assert (caught.value.status, caught.value.code, caught.value.provider) == (404, "model_not_found", "toy")


async def test_a_json_answer_to_a_stream_request_is_an_error(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json({"error": {"message": "upstream failed"}}, status=200))
    with pytest.raises(ProviderError, match="upstream failed"):
        await collect(toy(loopback, max_retries=0, retry_policy=None), ask())


async def test_a_stream_cut_before_its_end_marker_is_incomplete(loopback: LoopbackServer) -> None:
    loopback.enqueue(*[Reply.sse("")] * 3)
    with pytest.raises(ProviderError) as caught:
        await collect(toy(loopback), ask())
    assert caught.value.type == "incomplete_stream"
    assert len(loopback.requests) == 3  # nothing reached the caller, so it was retried


async def test_a_mapping_that_trips_over_the_payload_reports_an_invalid_stream(loopback: LoopbackServer) -> None:
    bad = 'event: text\ndata: {"not_t": 1}\n\n'
    loopback.enqueue(*[Reply.sse(bad)] * 3)
    with pytest.raises(ProviderError) as caught:
        await collect(toy(loopback), ask())
    assert caught.value.type == "invalid_stream" and caught.value.body == '{"not_t": 1}'

    loopback.enqueue(Reply.sse("event: text\ndata: {truncated\n\n"))
    with pytest.raises(ProviderError) as caught:
        await collect(toy(loopback, max_retries=0, retry_policy=None), ask())
    assert caught.value.type == "invalid_stream"


async def test_events_after_the_end_marker_are_drained_so_the_connection_is_reused(loopback: LoopbackServer) -> None:
    trailing = toy_stream("a") + "event: text\ndata: {\"t\": \"ignored\"}\n\n"
    loopback.enqueue(Reply.sse(trailing), Reply.sse(toy_stream("b")))
    async with httpx.AsyncClient() as client:
        model = toy(loopback, client=client)
        first = await collect(model, ask())
        second = await collect(model, ask())
    assert [e.text for e in first if isinstance(e, TextDelta)] == ["a"]
    assert [e.text for e in second if isinstance(e, TextDelta)] == ["b"]
    assert loopback.connections == 1


def test_key_and_base_url_from_the_providers_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOY_API_KEY", "from-env")
    monkeypatch.setenv("TOY_BASE_URL", "https://toy.example/api/")
    model = ToyModel("m")
    assert model.base_url == "https://toy.example/api" and model.default_headers() == {"x-toy-key": "from-env"}
    assert repr(model) == "ToyModel('m', base_url='https://toy.example/api')"
    assert model.retries_before_output is True


def test_a_missing_key_names_the_providers_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOY_API_KEY", raising=False)
    monkeypatch.delenv("TOY_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="TOY_API_KEY"):
        ToyModel("m")
    assert ToyModel("m", base_url="http://localhost:8080").default_headers() == {}  # loopback: keyless
    assert ToyModel("m", api_key="").default_headers() == {}  # "" opts out of a key


async def test_a_whole_turn_through_think(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(toy_stream("Hello ", "there")))
    agent = Think(model=toy(loopback), store=":memory:", load_entrypoints=False)
    try:
        result = await agent.session("s").chat("hi")
    finally:
        agent.close()
    assert result.status == "completed" and result.text == "Hello there"


def test_the_base_defaults_to_a_bearer_token() -> None:
    class Bare(StreamingHTTPModel):
        api_key_env = "BARE_KEY"

    assert Bare("m", api_key="k", base_url="http://127.0.0.1").default_headers() == {"authorization": "Bearer k"}
    with pytest.raises(NotImplementedError):
        Bare("m", api_key="k", base_url="http://127.0.0.1").build_body(ask())


# -- the shared wire helpers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ['{"a":1}', ' {"a": 1} ', '{"a":1}\n', "\ufeff{}", "[DONE]", "", '{"a": }', "1", '"x"', "NaN", '{"a":1}{"b":2}', "{"],
)
def test_decode_json_is_json_loads(text: str) -> None:
    def outcome(decode: Any) -> Any:
        try:
            return ("ok", decode(text))
        except ValueError as error:
            return ("error", type(error), str(error))

    expected, got = outcome(json.loads), outcome(_wire.decode_json)
    assert repr(got) == repr(expected)  # repr: NaN != NaN


def test_wire_helpers() -> None:
    assert _wire.parse_tool_input("") == {} and _wire.parse_tool_input("  ") == {}
    assert _wire.parse_tool_input('{"a": 1}') == {"a": 1}
    assert _wire.parse_tool_input("[1]") is None and _wire.parse_tool_input("{") is None
    assert _wire.wire_name("my schema!", 64) == "my_schema_" and _wire.wire_name("", 64) == "output"
    assert _wire.wire_name("x" * 100, 60) == "x" * 60
    assert toy_reason("cut") == "length" and toy_reason(None) == "other" and toy_reason("???") == "other"


def test_no_provider_imports_another() -> None:
    models = Path(__file__).resolve().parents[2] / "think_core" / "models"
    providers = {"openai", "anthropic"}
    for name in providers:
        tree = ast.parse((models / f"{name}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}
        assert not (imported & (providers - {name})), f"{name}.py imports {imported & providers}"
