"""WebSocket compression that holds no memory between messages.

uvicorn negotiates permessage-deflate with context takeover: every connection keeps a zlib
compressor (a 4 KiB window at memLevel 5, ~37 KiB) and a decompressor (~7 KiB) for as long as it
is open, about 60 % of what an idle chat connection costs the server. Here both sides are told
not to take the context over (RFC 7692 §7.1.1), so each compressed message gets a fresh zlib
stream, dropped once the message is done: an idle connection holds none. Messages under
:data:`COMPRESS_THRESHOLD` bytes (a live stream's events, a few hundred bytes each) are sent
uncompressed, as RFC 7692 lets a sender choose per message; without the shared context they
would barely shrink, and skipping them saves a zlib stream per event. Large messages (a chat's
history, a state) are still compressed.
"""

from __future__ import annotations

from collections.abc import Sequence

from websockets.extensions.base import Extension
from websockets.extensions.permessage_deflate import PerMessageDeflate, ServerPerMessageDeflateFactory
from websockets.frames import Frame, Opcode
from websockets.typing import ExtensionParameter

__all__ = ["COMPRESS_THRESHOLD", "WS_COMPRESSION_MODES", "CompactDeflateFactory"]

#: Messages shorter than this go out uncompressed (node's ``ws`` uses the same default).
COMPRESS_THRESHOLD = 1024


class _LargeMessageDeflate(PerMessageDeflate):
    """permessage-deflate without context takeover that leaves small whole messages as they are."""

    def encode(self, frame: Frame) -> Frame:
        if frame.fin and frame.opcode in (Opcode.TEXT, Opcode.BINARY) and len(frame.data) < COMPRESS_THRESHOLD:
            return frame  # rsv1 unset: the peer reads it as an uncompressed message
        return super().encode(frame)


class CompactDeflateFactory(ServerPerMessageDeflateFactory):
    def __init__(self) -> None:
        # uvicorn's window sizes; no context takeover either way, so nothing is kept between messages.
        super().__init__(
            server_no_context_takeover=True, client_no_context_takeover=True,
            server_max_window_bits=12, client_max_window_bits=12, compress_settings={"memLevel": 5},
        )

    def process_request_params(
        self, params: Sequence[ExtensionParameter], accepted_extensions: Sequence[Extension]
    ) -> tuple[list[ExtensionParameter], PerMessageDeflate]:
        response, extension = super().process_request_params(params, accepted_extensions)
        compact = _LargeMessageDeflate(
            extension.remote_no_context_takeover, extension.local_no_context_takeover,
            extension.remote_max_window_bits, extension.local_max_window_bits, extension.compress_settings,
        )
        return response, compact


#: ``think serve --ws-compression``: ``large`` (the default: as above), ``all`` (uvicorn's own:
#: every message, the context kept per connection, ~44 KiB more per open connection), ``off``.
WS_COMPRESSION_MODES = ("large", "all", "off")
