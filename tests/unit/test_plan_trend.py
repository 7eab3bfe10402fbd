"""The growth trend of the state and the projection of the break from it."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from tidemark.compat import UTC
from tidemark.errors import UsageError
from tidemark.sizing.breaking import BreakPoint, break_point
from tidemark.sizing.memory import MemoryConf
from tidemark.sizing.resident import RowShape, Workload
from tidemark.sizing.trend import StatePoint, count_text, duration_text, growth_of, outlook

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GB = 1024**3


def _series(batches: int, start_rows: int, per_batch: int, seconds: float, updated: int = 0) -> list[StatePoint]:
    return [
        StatePoint(
            batch_id=b,
            rows=start_rows + b * per_batch,
            timestamp=T0 + timedelta(seconds=b * seconds),
            input_rows=per_batch + updated,
            updated_rows=per_batch + updated,
        )
        for b in range(batches)
    ]


def test_growth_is_the_slope_and_the_median_gap() -> None:
    growth = growth_of(_series(10, 5_000, 12_000, 195.0, updated=3_000))
    assert growth.keys_per_batch == pytest.approx(12_000)
    assert growth.seconds_per_batch == pytest.approx(195.0)
    assert growth.keys_now == 5_000 + 9 * 12_000
    assert growth.input_rows_per_batch == 15_000
    # numRowsUpdated counts new keys too: the rest are updates of existing keys
    assert growth.updated_per_batch == 3_000


def test_growth_reads_only_the_window_and_sorts_by_batch() -> None:
    early = _series(20, 0, 1_000, 10.0)
    late = [dataclasses.replace(p, rows=19_000 + (p.batch_id - 19) * 5_000) for p in early[19:]]
    points = [*early[:19], *late]
    extended = [StatePoint(b, 19_000 + (b - 19) * 5_000, T0 + timedelta(seconds=10 * b)) for b in range(20, 30)]
    growth = growth_of(list(reversed([*points, *extended])), window=10)
    assert (growth.first_batch, growth.last_batch) == (20, 29)
    assert growth.keys_per_batch == pytest.approx(5_000)


def test_growth_of_a_noisy_series_is_its_least_squares_slope() -> None:
    rows = [100, 130, 150, 190, 200]
    points = [StatePoint(b, r) for b, r in enumerate(rows)]
    mean_x, mean_y = 2.0, sum(rows) / 5
    slope = sum((b - mean_x) * (r - mean_y) for b, r in enumerate(rows)) / sum((b - mean_x) ** 2 for b in range(5))
    assert growth_of(points).keys_per_batch == pytest.approx(slope)
    assert growth_of(points).seconds_per_batch is None


def test_growth_needs_points_and_a_window_of_two() -> None:
    with pytest.raises(UsageError):
        growth_of([])
    with pytest.raises(UsageError):
        growth_of(_series(3, 0, 1, 1.0), window=1)


def _break_at(keys: float) -> BreakPoint:
    point = break_point(MemoryConf(executor_memory_bytes=1 * GB), RowShape(24, 16), Workload(keys=0))
    return dataclasses.replace(point, keys_at_break=keys, cluster_keys_at_break=keys)


def test_outlook_says_batches_and_time_left_at_the_current_growth() -> None:
    growth = growth_of(_series(10, 0, 12_000, 195.0))
    limit = growth.keys_now + 40 * 12_000
    view = outlook(growth, _break_at(limit))
    assert view.batches_left == pytest.approx(40)
    assert view.time_left == timedelta(seconds=40 * 195)
    assert view.summary == (
        "at the current growth of 12 k keys per batch this executor runs out of heap in about 40 batches "
        f"(2 h 10 min), at {count_text(limit)} keys"
    )


def test_outlook_when_the_state_does_not_grow_or_is_already_past() -> None:
    flat = growth_of(_series(5, 50_000, 0, 5.0))
    view = outlook(flat, _break_at(200_000))
    assert view.batches_left is None
    assert "does not grow" in view.summary
    assert "25%" in view.summary
    past = outlook(flat, _break_at(40_000))
    assert past.batches_left == 0
    assert "already past" in past.summary


@pytest.mark.parametrize(
    ("value", "text"), [(850, "850"), (12_000, "12 k"), (1_234_567, "1.2 M"), (45_600_000, "46 M"), (2.5e9, "2.5 G")]
)
def test_count_text(value: float, text: str) -> None:
    assert count_text(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45 s"), (720, "12 min"), (7800, "2 h 10 min"), (7200, "2 h"), (3 * 86400 + 4 * 3600, "3 d 4 h")],
)
def test_duration_text(seconds: int, text: str) -> None:
    assert duration_text(timedelta(seconds=seconds)) == text
