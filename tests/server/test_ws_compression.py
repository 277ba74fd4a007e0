"""WebSocket compression as ``think serve`` negotiates it: permessage-deflate without context
takeover either way (an idle connection keeps no zlib state), small messages sent as they are,
large ones compressed — seen frame by frame by a real ``websockets`` client."""

from __future__ import annotations

from typing import Any

from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory, PerMessageDeflate
from websockets.frames import Frame, Opcode

from tests.support import agents
from tests.support.serve import think_serve
from tests.support.web import chat_request, user
from tests.support.ws import client, serve
from think_core.models.scripted import ScriptedModel, Step
from think_core.server.ws_compression import COMPRESS_THRESHOLD

make_agent = agents.make_agent.using(store=":memory:")


class RecordingDeflate(PerMessageDeflate):
    """The client's permessage-deflate, noting each data frame's size on the wire, its size
    decoded and its RSV1 bit (set: compressed)."""

    frames: list[tuple[int, int, bool]]

    def decode(self, frame: Frame, *, max_size: int | None = None) -> Frame:
        decoded = super().decode(frame, max_size=max_size)
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
            self.frames.append((len(frame.data), len(decoded.data), frame.rsv1))
        return decoded


class RecordingFactory(ClientPerMessageDeflateFactory):
    def __init__(self) -> None:
        super().__init__(client_max_window_bits=True)
        self.extension: RecordingDeflate | None = None

    def process_response_params(self, params: Any, accepted_extensions: Any) -> PerMessageDeflate:
        negotiated = super().process_response_params(params, accepted_extensions)
        self.extension = RecordingDeflate(
            negotiated.remote_no_context_takeover, negotiated.local_no_context_takeover,
            negotiated.remote_max_window_bits, negotiated.local_max_window_bits, negotiated.compress_settings,
        )
        self.extension.frames = []
        return self.extension


async def test_large_messages_are_compressed_small_ones_are_not_and_no_context_is_kept() -> None:
    history = [user(f"earlier message {i}: " + "lorem ipsum dolor sit amet " * 4, f"u{i}") for i in range(40)]
    agent = make_agent(ScriptedModel([Step(text="a short answer")]))
    await agent.session("s1").add_messages(history)
    factory = RecordingFactory()
    async with serve(agent) as base, client(base, compression=None, extensions=[factory]) as c:
        response = c.ws.response
        assert response is not None
        negotiated = response.headers["Sec-WebSocket-Extensions"]
        assert "server_no_context_takeover" in negotiated and "client_no_context_takeover" in negotiated, negotiated
        snapshot = await c.recv()
        assert [m["parts"][0]["text"] for m in snapshot["messages"]] == [m["parts"][0]["text"] for m in history]
        assert factory.extension is not None
        wire, plain, compressed = factory.extension.frames[0]
        assert compressed and wire < plain / 2  # the history, compressed

        # The client compresses what it sends (every message, a fresh context each time): two
        # requests in a row are both read.
        await c.send(chat_request("r1", [*history, user("hello", "u-new")]))
        chunks, _ = await c.stream("r1")
        assert "".join(ch.get("delta", "") for ch in chunks if ch["type"] == "text-delta") == "a short answer"
        frames = factory.extension.frames
        assert sum(plain < COMPRESS_THRESHOLD for _, plain, _ in frames) >= 5, frames  # the stream's chunks
        assert all(compressed == (plain >= COMPRESS_THRESHOLD) for _, plain, compressed in frames), frames
        await c.send(chat_request("r2", [*history, user("hello", "u-new"), user("again", "u-again")]))
        frame, _ = await c.until(lambda f: f.get("id") == "r2" and f.get("done") is True)
        assert "error" not in frame, frame


async def test_think_serve_can_turn_compression_off_or_keep_uvicorns(tmp_path: Any) -> None:
    for mode, expected in (("off", None), ("all", "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12")):
        async with think_serve("--model", "demo", "--db", str(tmp_path / f"{mode}.db"), "--ws-compression", mode) as (_, base):
            async with client(base.replace("http://", "ws://"), f"s-{mode}") as c:
                assert c.ws.response is not None
                assert c.ws.response.headers.get("Sec-WebSocket-Extensions") == expected
                assert (await c.recv())["type"] == "cf_agent_chat_messages"
