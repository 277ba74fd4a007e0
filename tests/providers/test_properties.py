"""Property tests (hypothesis) for the parsers that face untrusted bytes and model output:

* the SSE reader: any sequence of events, serialised with LF, CRLF or CR line endings (mixed),
  with comments, unknown fields and an optional BOM, split at arbitrary byte boundaries,
  parses back to the same events;
* OpenAI tool-call streaming: JSON objects split into arbitrary argument fragments, several
  calls interleaved by ``index``, the SSE bytes split at arbitrary read boundaries, reassemble
  to the same objects; arguments that are not a JSON object give ``ToolCall.input is None``
  (``{}`` when blank) and never raise;
* ``Tool.validate_input`` raises nothing but ``ToolInputError``, whatever dict it is given.

The provider tests run the real ``OpenAIChatModel.stream`` over an in-memory httpx transport
that serves the given byte chunks (the loopback-socket tests are in test_openai_provider.py;
here hundreds of examples must stay fast).
"""

# No ``from __future__ import annotations`` here: ``@tool`` reads the signature as given, and a
# string annotation naming a class of this module (``Address``) would not resolve.

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from think_core.events import ToolCall, ToolInputDelta, ToolInputStart
from think_core.models.base import ModelRequest, UserMessage
from think_core.models.openai import OpenAIChatModel
from think_core.models.retry import RetryPolicy
from think_core.models.sse import SSEDecoder, SSEEvent
from think_core.tools import Tool, ToolInputError, tool

FAST = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# -- SSE -------------------------------------------------------------------------------------------

line_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20)
field_value = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\0"), max_size=12)
endings = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def sse_events(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Events as the fields a server sends: 1+ data lines, optional event name, id, retry."""
    return draw(
        st.lists(
            st.fixed_dictionaries(
                {"data": st.lists(line_text, min_size=1, max_size=4)},
                optional={
                    "event": field_value,
                    "id": field_value,
                    "retry": st.integers(min_value=0, max_value=10**9),
                    "comment": line_text,
                    "unknown": field_value,
                },
            ),
            max_size=8,
        )
    )


def stream_bytes(events: list[dict[str, Any]], draw: st.DrawFn, terminate_last: bool) -> tuple[bytes, list[SSEEvent]]:
    """The stream's bytes (line endings drawn per line) and the events a reader must see."""
    lines: list[str] = []
    expected: list[SSEEvent] = []
    last_id: str | None = None
    for event in events:
        if "comment" in event:
            lines.append(":" + event["comment"])
        if "event" in event:
            lines.append("event: " + event["event"])
        if "id" in event:
            lines.append("id: " + event["id"])
            last_id = event["id"]
        for index, data in enumerate(event["data"]):
            lines.append("data: " + data)
            if index == 0 and "unknown" in event:
                lines.append("x-unknown: " + event["unknown"])
        if "retry" in event:
            lines.append(f"retry: {event['retry']}")
        lines.append("")  # the blank line that dispatches the event
        expected.append(SSEEvent("\n".join(event["data"]), event.get("event") or "message", last_id, event.get("retry")))
    if lines and not terminate_last:
        lines.pop()  # no blank line after the last event: the reader dispatches it at the end
    out: list[str] = []
    previous = ""
    for line in lines:
        ending = draw(endings)
        if previous == "\r" and line == "" and ending == "\n":
            ending = "\r\n"  # CR followed by an empty LF line would read as one CRLF
        out.append(line + ending)
        previous = ending
    return "".join(out).encode("utf-8"), expected


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@FAST
@given(events=sse_events(), bom=st.booleans(), terminate_last=st.booleans(),
       cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12), data=st.data())
def test_sse_round_trip_at_any_split(events: list[dict[str, Any]], bom: bool, terminate_last: bool,
                                     cuts: list[int], data: st.DataObject) -> None:
    stream, expected = stream_bytes(events, data.draw, terminate_last)
    if bom:
        stream = b"\xef\xbb\xbf" + stream
    decoder = SSEDecoder()
    got: list[SSEEvent] = []
    for piece in split_at(stream, cuts):
        got += decoder.feed(piece)
    got += decoder.flush()
    assert got == expected


@FAST
@given(events=sse_events(), data=st.data())
def test_sse_byte_by_byte_equals_one_read(events: list[dict[str, Any]], data: st.DataObject) -> None:
    stream, expected = stream_bytes(events, data.draw, True)
    one, bytewise = SSEDecoder(), SSEDecoder()
    assert one.feed(stream) + one.flush() == expected
    got: list[SSEEvent] = []
    for i in range(len(stream)):
        got += bytewise.feed(stream[i : i + 1])
    assert got + bytewise.flush() == expected


# -- OpenAI tool-call fragments ---------------------------------------------------------------------

json_scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(10**18), max_value=10**18)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=10), json_values, max_size=6)


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


class _Wire(httpx.AsyncBaseTransport):
    """Answers every request with the given SSE byte chunks (an in-memory server)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Chunks(self.chunks))


def stream_events(chunks: list[bytes]) -> list[Any]:
    async def run() -> list[Any]:
        async with httpx.AsyncClient(transport=_Wire(chunks)) as client:
            model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k", client=client,
                                    retry_policy=RetryPolicy(max_retries=0))
            request = ModelRequest(messages=[UserMessage(content="hi")])
            async with aclosing(model.stream(request)) as events:
                return [event async for event in events]

    return asyncio.run(run())


def oa_event(delta: dict[str, Any], finish: str | None = None) -> str:
    payload = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return "data: " + json.dumps(payload) + "\n\n"


@st.composite
def fragmented_calls(draw: st.DrawFn, arguments: st.SearchStrategy[str]) -> tuple[list[str], list[str]]:
    """(argument texts, SSE event strings): 1-3 calls, each streamed as a header then argument
    fragments, the calls' fragments interleaved in a random order."""
    texts = draw(st.lists(arguments, min_size=1, max_size=3))
    queues: list[list[dict[str, Any]]] = []
    for index, text in enumerate(texts):
        cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=6))))
        fragments = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        first = fragments.pop(0) if draw(st.booleans()) else ""  # arguments may start in the header
        header = {"index": index, "id": f"call_{index}", "type": "function",
                  "function": {"name": f"tool_{index}", "arguments": first}}
        queues.append([header] + [{"index": index, "function": {"arguments": f}} for f in fragments])
    events = []
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        events.append(oa_event({"tool_calls": [queue.pop(0)]}))
    events.append(oa_event({}, "tool_calls"))
    events.append("data: [DONE]\n\n")
    return texts, events


@FAST
@given(objects=st.lists(json_objects, min_size=1, max_size=3), data=st.data(),
       cuts=st.lists(st.integers(min_value=0, max_value=100_000), max_size=10))
def test_tool_arguments_reassemble_from_any_fragments(objects: list[dict[str, Any]], data: st.DataObject,
                                                      cuts: list[int]) -> None:
    texts = [json.dumps(o, ensure_ascii=data.draw(st.booleans())) for o in objects]
    texts_drawn, events = data.draw(fragmented_calls(st.sampled_from(texts)))
    stream = "".join(events).encode()
    got = stream_events(split_at(stream, cuts))
    calls = [e for e in got if isinstance(e, ToolCall)]
    assert [c.tool_call_id for c in calls] == [f"call_{i}" for i in range(len(texts_drawn))]
    for index, (call, text) in enumerate(zip(calls, texts_drawn, strict=True)):
        assert call.raw_input == text
        assert call.input == json.loads(text)
        assert call.tool_name == f"tool_{index}"
        deltas = "".join(e.delta for e in got if isinstance(e, ToolInputDelta) and e.tool_call_id == call.tool_call_id)
        assert deltas == text
    starts = [e.tool_call_id for e in got if isinstance(e, ToolInputStart)]
    assert sorted(starts) == sorted(c.tool_call_id for c in calls)


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


not_objects = st.one_of(
    st.text(max_size=30),
    json_values.map(json.dumps),  # valid JSON, but mostly not an object
    json_objects.map(json.dumps).flatmap(lambda t: st.integers(0, max(len(t) - 1, 0)).map(lambda n: t[:n])),  # truncated
    st.just('{"a": NaN}'), st.just("{'single': 'quotes'}"), st.just('{"a": 1} trailing'),
)


@FAST
@given(data=st.data(), cuts=st.lists(st.integers(min_value=0, max_value=100_000), max_size=8))
def test_arguments_that_are_not_a_json_object_give_none(data: st.DataObject, cuts: list[int]) -> None:
    texts, events = data.draw(fragmented_calls(not_objects))
    got = stream_events(split_at("".join(events).encode(), cuts))  # must not raise
    calls = [e for e in got if isinstance(e, ToolCall)]
    assert len(calls) == len(texts)
    for call, text in zip(calls, texts, strict=True):
        assert call.raw_input == text
        if not text.strip():
            assert call.input == {}
        elif _is_json_object(text):
            assert isinstance(call.input, dict)
            assert json.dumps(call.input) == json.dumps(json.loads(text))
        else:
            assert call.input is None


# -- Tool.validate_input ------------------------------------------------------------------------------


class Address(BaseModel):
    street: str
    number: int = 1


@tool
def typed(a: int, b: str = "x", flag: bool = False, ratio: float | None = None) -> str:
    """Scalars with defaults."""
    return "ok"


@tool
def nested(items: list[int], address: Address, tags: dict[str, str] = {}) -> str:  # noqa: B006
    """Containers and a model."""
    return "ok"


@tool
async def untyped(anything, *args, **kwargs) -> str:  # type: ignore[no-untyped-def]
    """No annotations at all."""
    return "ok"


CLIENT = Tool.client("client_side", parameters={"type": "object", "properties": {"q": {"type": "string"}},
                                                "required": ["q"]})
TOOLS = [typed, nested, untyped, CLIENT]
NAMES = ["a", "b", "flag", "ratio", "items", "address", "tags", "anything", "q", "args", "kwargs"]

odd_values = json_values | st.binary(max_size=8) | st.sets(st.integers(), max_size=3) | st.builds(object) \
    | st.tuples(st.integers(), st.text(max_size=3)) | st.complex_numbers(allow_nan=False)
arbitrary_dicts = st.dictionaries(
    st.sampled_from(NAMES) | st.text(max_size=6) | st.integers() | st.none(),
    odd_values | st.dictionaries(st.sampled_from(["street", "number"]) | st.text(max_size=4), odd_values, max_size=3),
    max_size=6,
)


@FAST
@given(tool_index=st.integers(0, len(TOOLS) - 1), raw=arbitrary_dicts | odd_values)
def test_validate_input_raises_only_tool_input_error(tool_index: int, raw: Any) -> None:
    tool_ = TOOLS[tool_index]
    try:
        validated = tool_.validate_input(raw)
    except ToolInputError as exc:
        assert str(exc)  # a readable message for the model
        return
    assert isinstance(validated, dict)
