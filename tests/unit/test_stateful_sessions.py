"""Session merging and closing, against a hand-computed sessionization (no JVM)."""

from __future__ import annotations

import pytest

from tidemark.stateful.sessions import Session, merge_sessions, split_closed

GAP = 10


def test_events_merge_when_no_longer_than_gap_apart() -> None:
    # 0,3,8 form one session; 20 is 12 after 8 (new); 30 is exactly gap after 20 (same, as in Spark)
    assert merge_sessions([], [8, 0, 3, 20, 30], GAP) == [Session(0, 8, 3), Session(20, 30, 2)]


def test_a_late_event_can_bridge_two_open_sessions() -> None:
    open_sessions = [Session(0, 2, 2), Session(15, 16, 2)]
    assert merge_sessions(open_sessions, [9], GAP) == [Session(0, 16, 5)]


def test_an_event_before_a_session_extends_its_start() -> None:
    assert merge_sessions([Session(20, 25, 2)], [12], GAP) == [Session(12, 25, 3)]


@pytest.mark.parametrize(("watermark", "closed_count"), [(17, 0), (18, 1), (100, 2)])
def test_split_closed_uses_end_at_or_before_the_watermark(watermark: int, closed_count: int) -> None:
    sessions = [Session(0, 8, 3), Session(30, 40, 2)]
    closed, still_open = split_closed(sessions, GAP, watermark)
    assert len(closed) == closed_count
    assert closed + still_open == sessions
