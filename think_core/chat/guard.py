"""The guard of one session's chat requests: the rules of :mod:`think_core.chat.authority`
applied to a client's transcript with what the session knows besides its stored history — the
answer streaming now (a regeneration may name it), which tools the server runs itself (a
client may not answer their calls) and how large its users' files may be (the files of the
messages it does not have stored as sent are checked, see :mod:`think_core.chat.attachments`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..tools import AnyTool
from .attachments import AttachmentLimits, check_attachments
from .authority import check_answers, check_transcript
from .transcript import settled_answers

if TYPE_CHECKING:
    from ..runner.streams import SessionStreams
    from ..store import MessageWindow
    from .transcript import ClientTranscript

__all__ = ["ClientGuard"]


class ClientGuard:
    """Refuses what a chat client may not ask of this session (a
    :class:`~think_core.chat.submissions.TranscriptGuard`), given the ``window`` of the history
    the request needs."""

    def __init__(self, streams: SessionStreams, tools: Mapping[str, AnyTool], attachments: AttachmentLimits) -> None:
        self._streams = streams
        self._tools = tools
        self._attachments = attachments

    async def __call__(self, window: MessageWindow, transcript: ClientTranscript) -> None:
        live = await (self._streams.find(stored=window.stream) if window.stream_read else self._streams.find())
        start = live.chunks[0] if live is not None and live.streaming and live.chunks else {}
        in_flight = {start["messageId"]} if isinstance(start.get("messageId"), str) else set()
        check_transcript(window.messages, transcript.messages, trigger=transcript.trigger,
                         message_id=transcript.message_id, in_flight=in_flight)
        answers = [*transcript.answers, *settled_answers(window.waiting, transcript.messages)]
        check_answers(window.waiting, answers, {name for name, tool in self._tools.items() if not tool.is_client})
        # A client resends its whole transcript: the messages stored as it sends them were checked.
        stored = {m.id: m.parts for m in window.messages}
        check_attachments((m for m in transcript.messages if stored.get(m.id) != m.parts), self._attachments)
