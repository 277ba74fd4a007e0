"""Messages as the store tests write them: a text message by id (``msg``), the ids of messages
(``ids``), the text of a compaction's summary message (``summary_text``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from think_core.types import UIMessage


def msg(mid: str, text: str = "", role: str = "user", **kw: Any) -> UIMessage:
    return UIMessage(id=mid, role=role, parts=[{"type": "text", "text": text or mid}], **kw)


def ids(messages: Iterable[UIMessage]) -> list[str]:
    return [m.id for m in messages]


def summary_text(m: UIMessage) -> str:
    return m.parts[0]["text"]
