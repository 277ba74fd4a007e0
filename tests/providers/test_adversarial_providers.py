"""Adversarial tests of the HTTP providers (OpenAI Chat Completions, Anthropic Messages) against
the real-socket loopback server: garbage in the stream, streams that end mid-JSON, error pages
from proxies, empty bodies, never-ending streams that are cancelled, and Unicode split across
reads. Whole turns run through ``Think`` so the store is checked too ("loses nothing").

``xfail(strict=True, reason="BUG: ...")`` marks a real violation of the standard.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply, sse_body  # noqa: F401  (fixture)
from tests.support.wire import FAST, ask, collect, oa_chunk, oa_events
from think_core import ProviderError, hookimpl, tool
from think_core.agent import Think
from think_core.models.anthropic import AnthropicModel
from think_core.models.openai import OpenAIChatModel
from think_core.models.retry import RetryPolicy

ATTEMPTS = FAST.max_retries + 1


# -- wire helpers -----------------------------------------------------------------------------------


def oa_reply(*pieces: str) -> str:
    usage = oa_chunk(None, usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8})
    return sse_body(*oa_events(*pieces), oa_chunk({}, "stop"), usage, done=True)


def an_events(*pieces: str) -> list[dict[str, Any]]:
    return [
        {"type": "message_start", "message": {"id": "msg_adv", "type": "message", "role": "assistant", "content": [],
                                              "model": "claude-x", "usage": {"input_tokens": 5, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *[{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}} for p in pieces],
    ]


def an_end() -> list[dict[str, Any]]:
    return [
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ]


def an_text(*pieces: str) -> str:
    return sse_body(*an_events(*pieces), *an_end(), event_names=True)


PROVIDERS = ["openai", "anthropic"]


def model_for(provider: str, server: LoopbackServer, **kwargs: Any) -> Any:
    kwargs.setdefault("retry_policy", FAST)
    if provider == "openai":
        return OpenAIChatModel("gpt-4o", base_url=server.url + "/v1", api_key="sk-test", **kwargs)
    return AnthropicModel("claude-x", base_url=server.url, api_key="sk-ant", **kwargs)


def provider_text(provider: str, *pieces: str) -> str:
    return oa_reply(*pieces) if provider == "openai" else an_text(*pieces)


def partial_stream(provider: str, *pieces: str) -> str:
    """Events carrying ``pieces`` with no end-of-stream marker."""
    if provider == "openai":
        return sse_body(*oa_events(*pieces))
    return sse_body(*an_events(*pieces), event_names=True)


class ErrorSpy:
    """Records the errors the turn reports to plugins."""

    def __init__(self) -> None:
        self.errors: list[tuple[BaseException, str]] = []
        self.responses: list[str] = []

    @hookimpl
    def on_chat_error(self, error, ctx):
        self.errors.append((error, ctx.stage))

    @hookimpl
    def on_chat_response(self, result):
        self.responses.append(result.status)


def agent_for(model: Any, *plugins: Any, **kwargs: Any) -> Think:
    return Think(model, plugins=plugins, load_entrypoints=False, **kwargs)


async def stored_texts(agent: Think, session_id: str = "s") -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in await agent.session(session_id).messages()]


# -- garbage between events -------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_garbage_lines_comments_and_unknown_fields_between_events_are_ignored(
    provider: str, loopback: LoopbackServer
) -> None:
    good = provider_text(provider, "Hello", ", ", "world")
    events = good.split("\n\n")
    noise = [
        "this line is not a field",
        ": keep-alive comment",
        "retry: soon",
        "id: 7\nunknownfield: x",
        "event: ping",  # an event with no data is not dispatched
        ":" + "x" * 5000,  # a huge comment
        "\r",  # a stray CR line
    ]
    mixed: list[str] = []
    for i, event in enumerate(events):
        mixed.append(event)
        mixed.append(noise[i % len(noise)])
    loopback.enqueue(Reply.sse("\n\n".join(mixed), chunk_size=13))
    spy = ErrorSpy()
    agent = agent_for(model_for(provider, loopback), spy)
    result = await agent.session("s").chat("hi")
    assert result.status == "completed", result.error
    assert result.text == "Hello, world"
    assert await stored_texts(agent) == [("user", "hi"), ("assistant", "Hello, world")]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_non_json_event_data_before_output_is_retried_then_a_clear_error(
    provider: str, loopback: LoopbackServer
) -> None:
    garbage = "data: <html>definitely not json</html>\n\n"
    loopback.enqueue(*[Reply.sse(garbage) for _ in range(ATTEMPTS)])
    spy = ErrorSpy()
    agent = agent_for(model_for(provider, loopback), spy)
    result = await agent.session("s").chat("hi")
    assert result.status == "error"
    assert len(loopback.requests) == ATTEMPTS
    error, stage = spy.errors[0]
    assert isinstance(error, ProviderError) and error.type == "invalid_stream" and stage == "stream"
    assert "invalid JSON" in (result.error or "") and "definitely not json" in (result.error or "")
    assert await stored_texts(agent) == [("user", "hi")]
    assert spy.responses == ["error"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_non_json_event_data_after_output_keeps_the_partial_and_is_not_retried(
    provider: str, loopback: LoopbackServer
) -> None:
    loopback.enqueue(Reply.sse(partial_stream(provider, "Partial ", "answer") + "data: {oops\n\n" + provider_text(provider, "never")))
    spy = ErrorSpy()
    agent = agent_for(model_for(provider, loopback), spy)
    result = await agent.session("s").chat("hi")
    assert result.status == "error" and "invalid JSON" in (result.error or "")
    assert len(loopback.requests) == 1
    assert await stored_texts(agent) == [("user", "hi"), ("assistant", "Partial answer")]


MALFORMED_SHAPES = [
    pytest.param("openai", sse_body(oa_chunk({"content": "a"}), {"choices": [None]}, oa_chunk({}, "stop"), done=True),
                 id="oa-null-choice"),
    pytest.param("openai", sse_body({"choices": "not a list"}, done=True), id="oa-choices-str"),
    pytest.param("openai", sse_body({"choices": [{"index": 0, "delta": "not an object"}]}, done=True), id="oa-delta-str"),
    pytest.param("openai", sse_body(oa_chunk({"tool_calls": [5]}), oa_chunk({}, "tool_calls"), done=True),
                 id="oa-tool-call-int"),
    pytest.param("openai", sse_body(oa_chunk({"content": "a"}), oa_chunk({}, "stop"),
                                    oa_chunk(None, usage={"prompt_tokens": "many"}), done=True),
                 id="oa-usage-str"),
    pytest.param("anthropic", "event: message_start\ndata: 42\n\n", id="an-number"),
    pytest.param("anthropic", "data: null\n\n", id="an-null"),
    pytest.param("anthropic", "data: [1, 2]\n\n", id="an-array"),
    pytest.param("anthropic", sse_body({"type": "content_block_delta", "index": 0, "delta": "not an object"},
                                       event_names=True), id="an-delta-str"),
]


@pytest.mark.parametrize(("provider", "stream"), MALFORMED_SHAPES)
async def test_well_formed_json_of_the_wrong_shape_is_a_provider_error(
    provider: str, stream: str, loopback: LoopbackServer
) -> None:
    loopback.enqueue(*[Reply.sse(stream) for _ in range(ATTEMPTS)])
    with pytest.raises(ProviderError) as info:
        await collect(model_for(provider, loopback), ask())
    assert info.value.type == "invalid_stream"


# -- streams that end mid-JSON ----------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_whose_body_ends_inside_a_json_event_is_an_invalid_stream_error(
    provider: str, loopback: LoopbackServer
) -> None:
    whole = provider_text(provider, "Hel", "lo wor", "ld")
    cut = whole.index('"lo wor') + 5  # inside the second delta's JSON
    loopback.enqueue(Reply.sse(whole[:cut], chunk_size=17))  # a complete HTTP body, truncated SSE
    spy = ErrorSpy()
    agent = agent_for(model_for(provider, loopback), spy)
    result = await agent.session("s").chat("hi")
    assert result.status == "error"
    error = spy.errors[0][0]
    assert isinstance(error, ProviderError) and error.type == "invalid_stream"
    assert len(loopback.requests) == 1  # output had streamed: not retried
    assert await stored_texts(agent) == [("user", "hi"), ("assistant", "Hel")]


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_connection_lost_mid_event_keeps_the_partial_with_a_clear_error(
    provider: str, reset: bool, loopback: LoopbackServer
) -> None:
    whole = provider_text(provider, "Hel", "lo wor", "ld")
    cut = whole.index('"lo wor') + 5
    loopback.enqueue(Reply.sse(whole, chunks=[whole[:cut].encode(), whole[cut:].encode()], disconnect_after=1, reset=reset))
    spy = ErrorSpy()
    agent = agent_for(model_for(provider, loopback), spy)
    result = await agent.session("s").chat("hi")
    assert result.status == "error" and result.error
    assert len(loopback.requests) == 1
    assert await stored_texts(agent) == [("user", "hi"), ("assistant", "Hel")]
    assert spy.responses == ["error"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_without_its_end_marker_is_incomplete_not_a_short_answer(
    provider: str, loopback: LoopbackServer
) -> None:
    loopback.enqueue(Reply.sse(partial_stream(provider, "Only ", "half")))
    spy = ErrorSpy()
    agent = agent_for(model_for(provider, loopback), spy)
    result = await agent.session("s").chat("hi")
    assert result.status == "error"
    assert spy.errors[0][0].type == "incomplete_stream"
    assert await stored_texts(agent) == [("user", "hi"), ("assistant", "Only half")]


# -- error bodies where a stream was expected -------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_200_json_error_body_instead_of_a_stream_is_a_provider_error(
    provider: str, loopback: LoopbackServer
) -> None:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "upstream said no"}}
    loopback.enqueue(Reply.json(body))
    spy = ErrorSpy()
    agent = agent_for(model_for(provider, loopback), spy)
    result = await agent.session("s").chat("hi")
    assert result.status == "error" and "upstream said no" in (result.error or "")
    error = spy.errors[0][0]
    assert isinstance(error, ProviderError) and error.status == 200 and error.type == "invalid_request_error"
    assert await stored_texts(agent) == [("user", "hi")]


async def test_a_non_streaming_completion_answered_to_a_stream_request_is_a_clear_error(loopback: LoopbackServer) -> None:
    # A proxy that strips "stream": true answers with a plain completion object.
    loopback.enqueue(Reply.json({"id": "x", "object": "chat.completion",
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}))
    spy = ErrorSpy()
    agent = agent_for(model_for("openai", loopback), spy)
    result = await agent.session("s").chat("hi")
    assert result.status == "error" and result.error
    assert isinstance(spy.errors[0][0], ProviderError) and spy.errors[0][0].status == 200
    assert len(loopback.requests) == 1
    assert await stored_texts(agent) == [("user", "hi")]


PROXY_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n"
    + b"<!-- padding -->" * 200
    + b"<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_html_502_from_a_proxy_is_retried_then_a_bounded_clear_error(
    provider: str, loopback: LoopbackServer
) -> None:
    loopback.enqueue(*[Reply(status=502, headers={"content-type": "text/html"}, body=PROXY_502) for _ in range(ATTEMPTS)])
    spy = ErrorSpy()
    agent = agent_for(model_for(provider, loopback), spy)
    result = await agent.session("s").chat("hi")
    assert result.status == "error"
    assert len(loopback.requests) == ATTEMPTS
    error = spy.errors[0][0]
    assert isinstance(error, ProviderError) and error.status == 502
    assert "502" in (result.error or "") and len(result.error or "") < 1000  # bounded, not the whole page
    assert await stored_texts(agent) == [("user", "hi")]


@pytest.mark.parametrize(
    "reply",
    [
        lambda: Reply(status=200, headers={"content-type": "text/event-stream"}, body=b""),
        lambda: Reply(status=200, headers={}, body=b""),
        lambda: Reply(status=200, headers={"content-type": "text/html"}, body=b"<html><body>Please log in</body></html>"),
        lambda: Reply.sse(": only keep-alives\n\n: and more\n\n"),
    ],
    ids=["empty-sse", "empty-untyped", "html-200", "only-comments"],
)
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_empty_or_eventless_200_is_an_error_never_an_empty_answer(
    provider: str, reply: Callable[[], Reply], loopback: LoopbackServer
) -> None:
    loopback.enqueue(*[reply() for _ in range(ATTEMPTS)])
    spy = ErrorSpy()
    agent = agent_for(model_for(provider, loopback), spy)
    result = await agent.session("s").chat("hi")
    assert result.status == "error" and result.error
    assert isinstance(spy.errors[0][0], ProviderError)
    assert await stored_texts(agent) == [("user", "hi")]


# -- cancellation of a never-ending stream ----------------------------------------------------------


def endless(provider: str, n: int = 3000) -> Reply:
    return Reply.sse(partial_stream(provider, *[f"t{i} " for i in range(n)]), chunk_delay=0.01)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_session_cancel_of_a_never_ending_stream_closes_the_connection(
    provider: str, loopback: LoopbackServer
) -> None:
    loopback.enqueue(endless(provider))
    spy = ErrorSpy()
    agent = agent_for(model_for(provider, loopback), spy)
    session = agent.session("s")
    first_text = asyncio.Event()

    class Watch:
        @hookimpl
        def on_chunk(self, ctx):
            if ctx.chunk.type == "text-delta" and "t5" in ctx.chunk.text:
                first_text.set()

    agent.plugin_manager.register(Watch())
    task = asyncio.create_task(session.chat("talk forever", request_id="r1"))
    await asyncio.wait_for(first_text.wait(), 5)
    assert session.cancel("r1") is True
    result = await asyncio.wait_for(task, 3)
    assert result.status == "aborted"
    await loopback.wait_abandoned(timeout=3)  # the server saw the client hang up
    assert len(loopback.incomplete) == 1
    history = await stored_texts(agent)
    assert history[0] == ("user", "talk forever") and history[1][0] == "assistant"
    assert history[1][1].startswith("t0 t1 t2 t3 t4 t5")
    assert spy.responses == ["aborted"] and session.active_request_ids == []


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_outside_cancellation_of_a_never_ending_stream_propagates_and_closes_it(
    provider: str, loopback: LoopbackServer
) -> None:
    loopback.enqueue(endless(provider))
    agent = agent_for(model_for(provider, loopback))
    session = agent.session("s")
    task = asyncio.create_task(session.chat("talk forever"))
    deadline = time.monotonic() + 5
    while not loopback.requests:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await loopback.wait_abandoned(timeout=3)
    assert session.active_request_ids == []
    assert (await stored_texts(agent))[0] == ("user", "talk forever")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_cancel_during_a_retry_after_wait_aborts_at_once(provider: str, loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.json({"error": {"message": "slow down", "type": "rate_limit_error"}}, status=429,
                                headers={"retry-after": "30"}))
    agent = agent_for(model_for(provider, loopback, retry_policy=RetryPolicy(max_retries=2, cap_seconds=60)))
    session = agent.session("s")
    task = asyncio.create_task(session.chat("hi", request_id="r1"))
    deadline = time.monotonic() + 5
    while not loopback.requests:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # now inside the 30 s wait
    started = time.monotonic()
    session.cancel("r1")
    result = await asyncio.wait_for(task, 3)
    assert result.status == "aborted" and time.monotonic() - started < 1.0
    assert len(loopback.requests) == 1
    assert await stored_texts(agent) == [("user", "hi")]


# -- Unicode split across reads ---------------------------------------------------------------------


TRICKY = "naïve café — 日本語 👩‍👩‍👧‍👦 e\u0301 مرحبا 🇵🇹 𝄞"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_unicode_split_at_every_byte_arrives_intact(provider: str, loopback: LoopbackServer) -> None:
    pieces = [TRICKY[i:i + 3] for i in range(0, len(TRICKY), 3)]
    # json.dumps escapes non-ASCII: re-encode the payloads as raw UTF-8 so reads split characters.
    stream = json_unescaped(provider_text(provider, *pieces)).encode("utf-8")
    assert "日".encode() in stream and "👩".encode() in stream
    loopback.enqueue(Reply.sse(stream, chunk_size=1))
    agent = agent_for(model_for(provider, loopback))
    result = await agent.session("s").chat("hi")
    assert result.status == "completed", result.error
    assert result.text == TRICKY
    assert await stored_texts(agent) == [("user", "hi"), ("assistant", TRICKY)]


def json_unescaped(stream: str) -> str:
    """The same SSE stream with each data payload re-serialised with raw (unescaped) UTF-8."""
    out = []
    for line in stream.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            line = "data: " + json.dumps(json.loads(line[6:]), ensure_ascii=False)
        out.append(line)
    return "\n".join(out)


async def test_invalid_utf8_in_a_delta_is_replaced_not_fatal(loopback: LoopbackServer) -> None:
    stream = json_unescaped(oa_reply("ok ", "X", " end")).encode("utf-8").replace(b'"X"', b'"\xff\xfe"')
    loopback.enqueue(Reply.sse(stream, chunk_size=5))
    agent = agent_for(model_for("openai", loopback))
    result = await agent.session("s").chat("hi")
    assert result.status == "completed", result.error
    assert result.text.startswith("ok ") and result.text.endswith(" end") and "\ufffd" in result.text


# -- an error event in the middle of a streamed tool call -------------------------------------------


async def test_an_error_event_mid_tool_call_keeps_the_text_and_never_runs_the_half_call(loopback: LoopbackServer) -> None:
    ran: list[str] = []

    @tool
    def lookup(q: str) -> str:
        """Look up."""
        ran.append(q)
        return q

    stream = sse_body(
        oa_chunk({"content": "Let me check."}),
        oa_chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": ""}}]}),
        oa_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": "ha'}}]}),
        {"error": {"message": "The server had an error while processing your request.", "type": "server_error"}},
    )
    loopback.enqueue(Reply.sse(stream))
    spy = ErrorSpy()
    agent = agent_for(model_for("openai", loopback), spy, tools=[lookup])
    session = agent.session("s")
    result = await session.chat("look it up")
    assert result.status == "error" and "server had an error" in (result.error or "")
    assert ran == [] and len(loopback.requests) == 1
    message = (await session.messages())[-1]
    assert message.role == "assistant" and message.text == "Let me check."
    assert not [p for p in message.parts if p["type"].startswith("tool-")]  # no half call persisted
    # The history is still valid for the next request.
    loopback.enqueue(Reply.sse(oa_reply("Recovered.")))
    assert (await session.chat("again")).status == "completed"
    sent = loopback.requests[-1].json["messages"]
    assert all(not m.get("tool_calls") for m in sent)
