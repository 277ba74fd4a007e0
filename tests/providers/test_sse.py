"""The SSE decoder: WHATWG framing rules, split reads, and a real socket."""

from __future__ import annotations

import httpx
import pytest

from tests.loopback import LoopbackServer, Reply  # noqa: F401
from think_core.models.sse import SSEDecoder, SSEEvent, aiter_sse


def decode(*chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.flush()


def datas(events: list[SSEEvent]) -> list[str]:
    return [e.data for e in events]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes) -> None:
    stream = b"data: one" + eol + eol + b"event: ping" + eol + b"data: two" + eol + eol
    events = decode(stream)
    assert [(e.event, e.data) for e in events] == [("message", "one"), ("ping", "two")]


def test_mixed_line_endings_in_one_stream() -> None:
    events = decode(b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\r\n\n")
    assert datas(events) == ["a", "b", "c", "d"]


def test_comments_and_keepalives_are_ignored() -> None:
    stream = b": OPENROUTER PROCESSING\n\n:\n\ndata: {\"x\":1}\n: mid-event comment\n\n"
    assert datas(decode(stream)) == ['{"x":1}']


def test_multiline_data_is_joined_with_newline() -> None:
    assert datas(decode(b"data: first\ndata:second\ndata\ndata:  third\n\n")) == ["first\nsecond\n\n third"]


def test_only_one_leading_space_is_stripped_and_empty_data_dispatches() -> None:
    assert datas(decode(b"data:  two spaces\n\ndata:\n\n")) == [" two spaces", ""]


def test_event_id_retry_fields() -> None:
    events = decode(b"event: message_start\nid: 7\nretry: 1500\ndata: x\n\ndata: y\n\nretry: soon\ndata: z\n\n")
    assert [(e.event, e.id, e.retry, e.data) for e in events] == [
        ("message_start", "7", 1500, "x"),
        ("message", "7", None, "y"),  # the last event id persists; event type and retry do not
        ("message", "7", None, "z"),  # a non-numeric retry is ignored
    ]


def test_event_without_data_is_not_dispatched_and_unknown_fields_ignored() -> None:
    assert datas(decode(b"event: ping\n\nfoo: bar\ndata: real\n\n")) == ["real"]


def test_id_with_nul_is_ignored() -> None:
    events = decode(b"id: a\x00b\ndata: x\n\n")
    assert events[0].id is None


def test_bom_is_stripped_even_when_split() -> None:
    bom = "\ufeff".encode()
    assert datas(decode(bom[:1], bom[1:] + b"data: x\n\n")) == ["x"]
    assert datas(decode(bom + b"data: y\n\n")) == ["y"]


def test_utf8_split_inside_a_character() -> None:
    payload = "data: héllo — 世界 🎉\n\n".encode()
    for cut in range(1, len(payload)):
        assert datas(decode(payload[:cut], payload[cut:])) == ["héllo — 世界 🎉"], cut


def test_unicode_line_separators_inside_data_are_not_line_breaks() -> None:
    # JSON may legally contain raw U+2028 / U+0085; str.splitlines() would break them.
    text = "data: {\"t\":\"a\u2028b\u0085c\x0cd\"}\n\n"
    assert datas(decode(text.encode())) == ["{\"t\":\"a\u2028b\u0085c\x0cd\"}"]


CRLF_STREAM = (
    b"event: a\r\ndata: {\"n\":1}\r\n\r\n"
    b": keep-alive\r\n\r\n"
    b"data: line1\r\ndata: line2\r\n\r\n"
    b"data: [DONE]\r\n\r\n"
)


def test_every_single_split_point_gives_the_same_events() -> None:
    expected = decode(CRLF_STREAM)
    assert datas(expected) == ['{"n":1}', "line1\nline2", "[DONE]"]
    for cut in range(1, len(CRLF_STREAM)):
        assert decode(CRLF_STREAM[:cut], CRLF_STREAM[cut:]) == expected, cut


def test_byte_by_byte_feed() -> None:
    assert decode(*[CRLF_STREAM[i : i + 1] for i in range(len(CRLF_STREAM))]) == decode(CRLF_STREAM)


def test_cr_split_from_lf_does_not_create_a_blank_line() -> None:
    # "data: a\r" | "\ndata: b\r\n\r\n" — the split CRLF must not dispatch "a" alone.
    assert datas(decode(b"data: a\r", b"\ndata: b\r\n\r\n")) == ["a\nb"]


def test_unterminated_last_event_is_flushed_at_eof() -> None:
    assert datas(decode(b"data: x\n\ndata: [DONE]")) == ["x", "[DONE]"]
    assert datas(decode(b"data: x\n\ndata: [DONE]\n")) == ["x", "[DONE]"]
    assert datas(decode(b"data: x\n\nevent: only-a-name")) == ["x"]


async def _aiter(chunks: list[bytes]):
    for chunk in chunks:
        yield chunk


async def test_aiter_sse_over_an_async_byte_stream() -> None:
    events = [e async for e in aiter_sse(_aiter([b"data: a\r", b"\n\r\ndat", b"a: b\n", b"\n"]))]
    assert datas(events) == ["a", "b"]


async def test_split_reads_over_a_real_socket(loopback: LoopbackServer) -> None:
    # odd chunk sizes, including cuts between "\r" and "\n" and inside a UTF-8 character
    stream = "event: e\r\ndata: {\"t\":\"héllo\"}\r\n\r\n: ping\r\n\r\ndata: two\r\ndata: lines\r\n\r\n".encode()
    cuts = [1, 7, 3, 2, 5, 11, 4, 1, 1, 13]
    chunks, pos = [], 0
    for size in cuts:
        chunks.append(stream[pos : pos + size])
        pos += size
    chunks.append(stream[pos:])
    assert any(c.endswith(b"\r") for c in chunks)
    loopback.enqueue(Reply.sse(stream, chunks=chunks, chunk_delay=0.002))
    async with httpx.AsyncClient() as client:
        async with client.stream("GET", loopback.url + "/events") as response:
            events = [e async for e in aiter_sse(response.aiter_bytes())]
    assert [(e.event, e.data) for e in events] == [("e", '{"t":"héllo"}'), ("message", "two\nlines")]
    assert loopback.requests[0].path == "/events"
