"""The compaction-overlay algebra on plain lists, apart from any backend."""

from __future__ import annotations

import pytest

from tests.support.messages import ids, msg
from think_core.store import COMPACTION_ROLE, COMPACTION_SUMMARY_PREFIX, Compaction
from think_core.store.overlays import Overlay, apply_overlays, effective_overlays, resolve_anchor

IDS = list("abcdefgh")


def comp(cid: int, start: str, end: str, summary: str = "") -> Compaction:
    return Compaction(id=cid, session_id="s", from_message_id=start, to_message_id=end,
                      summary=summary or f"s{cid}", created_at=0.0)


def spans(overlays: list[Overlay]) -> list[tuple[int, str, str, int, int]]:
    return [(o.compaction.id, o.from_id, o.to_id, o.start, o.end) for o in overlays]


def test_no_compactions_no_overlays() -> None:
    assert effective_overlays(IDS, []) == []
    assert effective_overlays([], [comp(1, "a", "b")]) == []


def test_disjoint_overlays_are_sorted_by_position() -> None:
    assert spans(effective_overlays(IDS, [comp(1, "f", "g"), comp(2, "a", "a")])) == [
        (2, "a", "a", 0, 0), (1, "f", "g", 5, 6)
    ]


def test_a_newer_overlap_absorbs_older_ones_into_their_union() -> None:
    compactions = [comp(1, "b", "c"), comp(2, "e", "f"), comp(3, "c", "e")]
    assert spans(effective_overlays(IDS, compactions)) == [(3, "b", "f", 1, 5)]
    # adjacency is not overlap
    assert spans(effective_overlays(IDS, [comp(1, "b", "c"), comp(2, "d", "e")])) == [
        (1, "b", "c", 1, 2), (2, "d", "e", 3, 4)
    ]
    # a newer range inside an older one still supersedes it, keeping the older extent
    assert spans(effective_overlays(IDS, [comp(1, "a", "g"), comp(2, "c", "d")])) == [(2, "a", "g", 0, 6)]


def test_compactions_with_a_missing_anchor_or_a_reversed_range_are_ignored() -> None:
    compactions = [comp(1, "a", "gone"), comp(2, "gone", "b"), comp(3, "d", "c"), comp(4, "e", "e")]
    assert spans(effective_overlays(IDS, compactions)) == [(4, "e", "e", 4, 4)]


def test_apply_overlays_splices_one_summary_message_per_overlay() -> None:
    messages = [msg(x) for x in IDS]
    overlays = effective_overlays(IDS, [comp(1, "b", "c", "first"), comp(2, "g", "h", "last")])
    out = apply_overlays(messages, overlays)
    assert ids(out) == ["a", "compaction_1", "d", "e", "f", "compaction_2"]
    assert out[1].role == COMPACTION_ROLE
    assert out[1].parts == [{"type": "text", "text": COMPACTION_SUMMARY_PREFIX + "first"}]
    assert out[5].metadata == {"compaction": {"id": 2, "from": "g", "to": "h"}}
    assert apply_overlays(messages, []) == messages


def test_resolve_anchor() -> None:
    overlays = effective_overlays(IDS, [comp(3, "b", "d")])
    assert resolve_anchor("compaction_3", IDS, overlays, start=True) == "b"
    assert resolve_anchor("compaction_3", IDS, overlays, start=False) == "d"
    assert resolve_anchor("e", IDS, overlays, start=True) == "e"
    assert resolve_anchor("unknown", IDS, overlays, start=True) == "unknown"  # checked by the caller
    assert resolve_anchor("compaction_3", ["compaction_3", *IDS], overlays, start=True) == "compaction_3"
    with pytest.raises(ValueError, match="unknown compaction 'compaction_4'"):
        resolve_anchor("compaction_4", IDS, overlays, start=True)
    with pytest.raises(ValueError, match="unknown compaction"):
        resolve_anchor("compaction_1", IDS, effective_overlays(IDS, [comp(1, "a", "gone")]), start=False)
