"""The crash loop (``bench/crash_loop.py``): real worker processes SIGKILLed at every marked
point of a durable turn, restarted, audited — nothing lost, answered twice or wrongly, no
non-idempotent tool run twice, every history well-formed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow
def test_crash_loop_at_every_point() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import crash_loop
    finally:
        sys.path.remove(str(BENCH))
    rounds = 2 * len(crash_loop.POINTS)
    result = crash_loop.run(rounds, messages=3, lease=2.0, seed=7)
    assert result["problems"] == []
    assert all(result["totals"][key] == 0 for key in crash_loop.COUNTS), result["totals"]
    assert result["kills"] == {point: 2 for point in crash_loop.POINTS}  # every round really killed
