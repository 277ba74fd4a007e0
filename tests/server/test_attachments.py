"""The files a user sends through the server: an AI SDK ``file`` part reaches the model's request
(HTTP and WebSocket, again from the history in a later turn) and ``GET /api/sessions/{id}/messages``
returns it as sent. Over the agent's ``AttachmentLimits`` a 413 (HTTP)
or an error frame (WebSocket, the connection usable after it); a malformed data URL or bytes
that are not their ``mediaType`` a 400 / an error frame; nothing stored either way. A 64 MiB
attachment gets its 413 before the server has read it."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from tests.loopback import LoopbackServer, RecordedRequest, Reply
from tests.support import agents
from tests.support.files import DOT_PNG, JPEG_START, data_url, file_part, png_of_size, user_with_files
from tests.support.http_chat import api, post_chat, transport_body
from tests.support.serve import think_serve
from tests.support.web import chat_request, ui_text, user
from tests.support.wire import oa_text, openai_model
from tests.support.ws import client, serve
from think_core import AttachmentLimits
from think_core.models.scripted import ScriptedModel, Step
from think_core.server import DEFAULT_MAX_BODY_BYTES, create_app
from think_core.server.testing import running_server, wait_until_healthy

LIMITS = AttachmentLimits(max_file_bytes=50_000, max_message_bytes=80_000)
MIB = 1024 * 1024

make_agent = agents.make_agent.using(store=":memory:", attachments=LIMITS)

#: What the server refuses: (the message, HTTP status, error type, words the error has).
REFUSED: dict[str, tuple[dict[str, Any], int, str, list[str]]] = {
    "file too large": (
        user_with_files("look", "u1", file_part(png_of_size(50_001), filename="big.png")),
        413, "payload_too_large", ["'big.png'", "50,000 bytes"],
    ),
    "files too large together": (
        user_with_files("look", "u1", file_part(png_of_size(45_000)), file_part(png_of_size(45_000), filename="b.png")),
        413, "payload_too_large", ["90,000 bytes together"],
    ),
    "malformed data URL": (
        user_with_files("look", "u1", {"type": "file", "mediaType": "image/png", "filename": "x.png", "url": "data:image/png;base64,@@"}),
        400, "invalid_attachment", ["'x.png'", "malformed"],
    ),
    "bytes not the media type": (
        user_with_files("look", "u1", file_part(JPEG_START, "image/png", "photo.png")),
        400, "invalid_attachment", ["'photo.png'", "not image/png", "image/jpeg"],
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_http_refuses_a_file_with_a_json_error_and_stores_nothing(case: str) -> None:
    message, status, kind, words = REFUSED[case]
    model = ScriptedModel([Step(text="Only the later one.")])
    agent = make_agent(model)
    async with api(agent) as http:
        refused = await http.post("/api/chat", json=transport_body("c", [message]))
        stored = (await http.get("/api/sessions/c/messages")).json()["messages"]
        _, chunks = await post_chat(http, transport_body("c", [user("just text", "u2")]))
    assert refused.status_code == status and refused.headers["content-type"] == "application/json"
    error = refused.json()["error"]
    assert error["type"] == kind and all(w in error["message"] for w in words), error
    assert stored == [] and len(model.requests) == 1
    assert ui_text(chunks) == "Only the later one."
    assert [m.id for m in await agent.session("c").messages()] == ["u2", chunks[0]["messageId"]]


@pytest.mark.parametrize("case", list(REFUSED))
async def test_websocket_refuses_a_file_with_an_error_frame_and_stays_usable(case: str) -> None:
    message, _, _, words = REFUSED[case]
    model = ScriptedModel([Step(text="Still here.")])
    agent = make_agent(model)
    async with serve(agent) as base, client(base) as c:
        await c.recv()  # the history
        await c.send(chat_request("bad", [message]))
        frame, _ = await c.until(lambda f: f.get("id") == "bad" and f.get("done"))
        assert frame["type"] == "cf_agent_use_chat_response" and frame["error"] is True, frame
        assert all(w in frame["body"] for w in words), frame
        await c.send(chat_request("good", [user("just text", "u2")]))
        chunks, _ = await c.stream("good")
    assert ui_text(chunks) == "Still here." and len(model.requests) == 1
    assert [m.id for m in await agent.session("s1").messages()] == ["u2", chunks[0]["messageId"]]


def _files_seen(request: RecordedRequest) -> Reply:
    """The loopback model's answer: what the user's last message held, as it received it."""
    content = request.json["messages"][-1]["content"]
    kinds = [block["type"] for block in content] if isinstance(content, list) else ["text"]
    return Reply.sse(oa_text(f"I received {', '.join(kinds)}."))


async def test_a_file_part_reaches_the_model_and_comes_back_from_the_history(loopback: LoopbackServer) -> None:
    loopback.handler = _files_seen
    agent = make_agent(openai_model(loopback))
    first = user_with_files("what is this?", "u1", file_part(DOT_PNG))
    pdf = b"%PDF-1.4 one page"
    second = user_with_files("and this?", "u3", file_part(pdf, "application/pdf", "page.pdf"))
    async with api(agent) as http:
        _, chunks = await post_chat(http, transport_body("s1", [first]))
        async with serve(agent) as base, client(base) as c:
            history = (await c.recv())["messages"]
            await c.send(chat_request("r2", [*history, second]))
            later, _ = await c.stream("r2")
        stored = (await http.get("/api/sessions/s1/messages")).json()["messages"]
    assert ui_text(chunks) == "I received image_url, text." and ui_text(later) == "I received file, text."
    image = {"type": "image_url", "image_url": {"url": data_url(DOT_PNG, "image/png")}}
    first_request, second_request = (r.json["messages"] for r in loopback.requests)
    assert first_request[-1] == {"role": "user", "content": [image, {"type": "text", "text": "what is this?"}]}
    # The later turn sends the earlier image again, from the stored history.
    assert second_request[-3]["content"] == first_request[-1]["content"]
    document = {"type": "file", "file": {"filename": "page.pdf", "file_data": data_url(pdf, "application/pdf")}}
    assert second_request[-1]["content"] == [document, {"type": "text", "text": "and this?"}]
    users = [(m["id"], m["parts"]) for m in stored if m["role"] == "user"]
    assert users == [("u1", first["parts"]), ("u3", second["parts"])]


async def _send_until_answered(host: str, port: int, head: bytes, pieces: Iterator[bytes]) -> tuple[bytes, int]:
    """Send ``head``, then the body ``pieces`` until the server answers; its answer and how many
    body bytes went out."""
    reader, writer = await asyncio.open_connection(host, port)
    answer = asyncio.ensure_future(_response(reader))
    sent = 0
    try:
        writer.write(head)
        for piece in pieces:
            if answer.done():
                break
            writer.write(piece)
            await writer.drain()
            sent += len(piece)
    except ConnectionError:  # the server answered and closed while the body was on its way
        pass
    try:
        return await asyncio.wait_for(answer, 30), sent
    finally:
        writer.close()


async def _response(reader: asyncio.StreamReader) -> bytes:
    """One HTTP response with a ``content-length``: its head and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    return head + await reader.readexactly(length)


def _huge_chat_body(file_bytes: int) -> tuple[int, Iterator[bytes]]:
    """The JSON body of a chat whose user message holds a ``file_bytes`` PNG, made as it is
    sent: its length, and its pieces (1 MiB of the data URL each)."""
    empty = {"type": "file", "mediaType": "image/png", "filename": "huge.png", "url": "data:image/png;base64,"}
    before, marker, after = json.dumps(transport_body("huge", [user_with_files("look", "u1", empty)])).partition("base64,")
    encoded = (file_bytes + 2) // 3 * 4

    def pieces() -> Iterator[bytes]:
        yield (before + marker).encode()
        for offset in range(0, encoded, MIB):
            yield b"A" * min(MIB, encoded - offset)
        yield after.encode()

    return len(before + marker) + encoded + len(after), pieces()


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_64_mib_attachment_gets_413_before_it_is_read_and_nothing_is_stored(declared: bool) -> None:
    model = ScriptedModel([Step(text="Small is fine.")])
    agent = agents.make_agent(model, store=":memory:")  # the defaults: a 32 MiB body, 10 MiB a file
    length, pieces = _huge_chat_body(64 * MIB)
    head = "POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    async with running_server(create_app(agent)) as base:
        host, port = base.removeprefix("http://").split(":")
        if declared:  # the headers alone: the answer comes before any of the body is sent
            raw, sent = await _send_until_answered(host, int(port), f"{head}Content-Length: {length}\r\n\r\n".encode(), iter(()))
        else:
            chunked = (f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces)
            raw, sent = await _send_until_answered(host, int(port), f"{head}Transfer-Encoding: chunked\r\n\r\n".encode(), chunked)
        async with api(agent) as http:
            stored = (await http.get("/api/sessions/huge/messages")).json()["messages"]
            _, chunks = await post_chat(http, transport_body("huge", [user("small", "u2")]))
    status, _, rest = raw.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 413 "), raw[:300]
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["error"]["type"] == "payload_too_large"
    # Chunked, the server reads up to its limit, then stops: far less than the 85 MiB sent as JSON.
    assert sent < DEFAULT_MAX_BODY_BYTES + 8 * MIB < length, (sent, length)
    assert stored == [] and ui_text(chunks) == "Small is fine."


async def test_think_serve_takes_the_limits_from_its_flags_and_think_toml(tmp_path: Path) -> None:
    (tmp_path / "think.toml").write_text("[think]\nattachments = { max_message_bytes = 3000 }\n")
    env = {**os.environ, "THINK_HOME": str(tmp_path), "THINK_CONFIG": str(tmp_path / "think.toml")}
    env.pop("THINK_API_TOKEN", None)
    args = ("--model", "demo", "--db", str(tmp_path / "chats.db"), "--max-file", "2KiB")
    async with think_serve(*args, env=env) as (_, base), httpx.AsyncClient(base_url=base, timeout=30) as http:
        await wait_until_healthy(http, timeout=30)
        one = await http.post("/api/chat", json=transport_body("c", [user_with_files("hi", "u1", file_part(png_of_size(2049)))]))
        two = user_with_files("hi", "u1", file_part(png_of_size(1600)), file_part(png_of_size(1600), filename="b.png"))
        both = await http.post("/api/chat", json=transport_body("c", [two]))
        fits = await http.post("/api/chat", json=transport_body("c", [user_with_files("hi", "u2", file_part(DOT_PNG))]))
        stored = (await http.get("/api/sessions/c/messages")).json()["messages"]
    assert one.status_code == 413 and "2,048 bytes" in one.json()["error"]["message"]
    assert both.status_code == 413 and "3,000 bytes per message" in both.json()["error"]["message"]
    assert fits.status_code == 200
    assert [m["id"] for m in stored if m["role"] == "user"] == ["u2"]


async def test_a_64_mib_attachment_over_the_websocket_closes_that_connection_unread_and_nothing_is_stored() -> None:
    model = ScriptedModel([Step(text="Small is fine.")])
    agent = agents.make_agent(model, store=":memory:")  # the defaults: frames up to 33 MiB are read
    huge = user_with_files("look", "u1", {"type": "file", "mediaType": "image/png", "filename": "huge.png",
                                          "url": "data:image/png;base64," + "A" * (64 * MIB // 3 * 4)})
    async with serve(agent) as base:
        async with client(base, max_size=None) as c:
            await c.recv()  # the history
            # Past the WebSocket layer's limit: the frame is refused on its header (1009), never read.
            with pytest.raises(ConnectionClosed) as closed:
                await c.send(chat_request("huge", [huge]))
                await c.recv()
            assert closed.value.rcvd is None or closed.value.rcvd.code == 1009
        async with client(base) as c:
            assert (await c.recv())["messages"] == []
            await c.send(chat_request("small", [user("small", "u2")]))
            chunks, _ = await c.stream("small")
    assert ui_text(chunks) == "Small is fine." and len(model.requests) == 1
    assert [m.id for m in await agent.session("s1").messages()][0] == "u2"
