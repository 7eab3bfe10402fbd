"""Downsampling a run's series into columns, against min / mean / max computed directly from the batches."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from tidemark.formats import BatchProgress
from tidemark.monitor.series import DURATION, WATERMARK_LAG, SeriesFold, state_rows_series

WIDTH = 484


def progress(batch: int, duration: int, operators: int = 1, watermark: bool = True) -> BatchProgress:
    data: dict[str, Any] = {
        "batchId": 1000 + batch,
        "timestamp": "2026-01-01T01:00:00.000Z",
        "batchDuration": duration,
        "durationMs": {"triggerExecution": duration, "addBatch": duration - 10},
        "stateOperators": [
            {"operatorName": f"op{i}", "numRowsTotal": batch * (i + 1), "numStateStoreInstances": 2}
            for i in range(operators)
        ],
    }
    if watermark:
        data["eventTime"] = {"watermark": "2026-01-01T00:59:00.000Z"}
    return BatchProgress.from_json(data)


def durations(n: int, spike: int | None = None) -> list[int]:
    rng = np.random.default_rng(5)
    values = [int(v) for v in rng.integers(900, 1100, size=n)]
    if spike is not None:
        values[spike] *= 10
    return values


@pytest.mark.parametrize("n", [WIDTH + 1, 2 * WIDTH, 10_007, 40_009])
def test_columns_tile_the_run_and_carry_exact_min_mean_max(n: int) -> None:
    values = durations(n, spike=n // 3)
    fold = SeriesFold(WIDTH)
    for batch, duration in enumerate(values):
        fold.add(progress(batch, duration))
    series = fold.result()
    columns = series.columns
    assert series.batches == n and not series.per_batch
    assert WIDTH // 2 <= len(columns) <= WIDTH
    assert columns[0].start == 0 and columns[-1].end == n
    assert all(a.end == b.start for a, b in itertools.pairwise(columns))
    array = np.array(values, dtype=float)
    for column in columns:
        assert (column.first_batch, column.last_batch) == (1000 + column.start, 1000 + column.end - 1)
        env = column.get(DURATION)
        assert env is not None
        part = array[column.start : column.end]
        assert (env.low, env.high) == (part.min(), part.max())
        assert env.mean == pytest.approx(part.mean())
    # The one spike is the high of exactly one column, and it is the maximum of all.
    highs = [c.get(DURATION).high for c in columns]  # type: ignore[union-attr]
    assert max(highs) == max(values) and sum(h == max(values) for h in highs) == 1


def test_a_short_run_has_one_column_per_batch() -> None:
    values = durations(WIDTH)
    fold = SeriesFold(WIDTH)
    for batch, duration in enumerate(values):
        fold.add(progress(batch, duration))
    series = fold.result()
    assert series.per_batch and len(series.columns) == WIDTH
    assert [c.get(DURATION).mean for c in series.columns] == values  # type: ignore[union-attr]


def test_missing_values_leave_gaps_and_late_operators_start_empty() -> None:
    # Batches 0-1999 have no watermark and no state operator; from 2000 on they have both.
    fold = SeriesFold(100)
    for batch in range(4000):
        late = batch >= 2000
        fold.add(progress(batch, 1000, operators=1 if late else 0, watermark=late))
    series = fold.result()
    assert series.operators == ("op0",)
    for column in series.columns:
        rows = column.get(state_rows_series(0))
        lag = column.get(WATERMARK_LAG)
        if column.end <= 2000:
            assert rows is None and lag is None
        elif column.start >= 2000:
            assert rows is not None and (rows.low, rows.high) == (column.start, column.end - 1)
            assert lag is not None and lag.mean == 60.0
        else:  # a column across the change covers only the batches that had the figure
            assert rows is not None and rows.low == 2000
