"""The compaction-overlay algebra, the same for every backend.

A compaction stores a summary for the range of messages ``from..to`` (inclusive, by position).
Compactions are never destructive: ``history()`` shows each effective range as one synthetic
``compaction_<id>`` message (the summary, and the files users sent in the range: a summary
cannot hold an image), ``list_messages()`` still shows the originals. A newer compaction
that overlaps an older one supersedes it, and the effective range becomes the union of both.
A compaction whose anchors were deleted is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..types import UIMessage
from .base import COMPACTION_ROLE, COMPACTION_SUMMARY_PREFIX, Compaction

__all__ = ["Overlay", "apply_overlays", "effective_overlays", "resolve_anchor"]

_COMPACTION_ID = re.compile(r"^compaction_(\d+)$")


@dataclass(frozen=True)
class Overlay:
    """One effective compaction: positions ``start..end`` (inclusive) and their message ids."""

    start: int
    end: int
    compaction: Compaction
    from_id: str
    to_id: str


def effective_overlays(message_ids: Sequence[str], compactions: Sequence[Compaction]) -> list[Overlay]:
    """The overlays in force over ``message_ids`` (in order), given every stored compaction
    (oldest first), sorted by position."""
    positions = {mid: i for i, mid in enumerate(message_ids)}
    active: list[tuple[int, int, Compaction]] = []
    for comp in compactions:
        start = positions.get(comp.from_message_id)
        end = positions.get(comp.to_message_id)
        if start is None or end is None or start > end:
            continue
        kept = []
        for a_start, a_end, a_comp in active:
            if a_start <= end and start <= a_end:  # overlap: the newer one absorbs it
                start, end = min(start, a_start), max(end, a_end)
            else:
                kept.append((a_start, a_end, a_comp))
        kept.append((start, end, comp))
        active = kept
    active.sort(key=lambda o: o[0])
    return [Overlay(s, e, c, message_ids[s], message_ids[e]) for s, e, c in active]


def apply_overlays(messages: Sequence[UIMessage], overlays: Sequence[Overlay]) -> list[UIMessage]:
    """``messages`` with each overlay's range replaced by its summary message."""
    out: list[UIMessage] = []
    pos = 0
    for overlay in overlays:
        comp = overlay.compaction
        out.extend(messages[pos : overlay.start])
        # The files users sent in the range stay with the summary: a summary cannot hold an image.
        files = [p for m in messages[overlay.start : overlay.end + 1] if m.role == "user" for p in m.parts
                 if p.get("type") == "file"]
        out.append(
            UIMessage(
                id=f"compaction_{comp.id}",
                role=COMPACTION_ROLE,
                parts=[{"type": "text", "text": COMPACTION_SUMMARY_PREFIX + comp.summary}, *files],
                metadata={"compaction": {"id": comp.id, "from": overlay.from_id, "to": overlay.to_id}},
            )
        )
        pos = overlay.end + 1
    out.extend(messages[pos:])
    return out


def resolve_anchor(message_id: str, message_ids: Sequence[str], overlays: Sequence[Overlay], *, start: bool) -> str:
    """The stored message a compaction anchor names. A synthetic ``compaction_<n>`` id (as seen
    in ``history()``) stands for that overlay's first (``start``) or last message; ``ValueError``
    for an unknown compaction. Other ids are returned as they are."""
    match = _COMPACTION_ID.match(message_id)
    if match is None or message_id in message_ids:  # a real message may merely look like one
        return message_id
    for overlay in overlays:
        if overlay.compaction.id == int(match.group(1)):
            return overlay.from_id if start else overlay.to_id
    raise ValueError(f"unknown compaction {message_id!r}")
