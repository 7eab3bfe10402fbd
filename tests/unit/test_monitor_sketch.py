"""The bounded-memory summaries against exact computations on the same data."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tidemark.monitor.sketch import Largest, QuantileSketch


def nearest_rank(values: list[float], q: float) -> float:
    """The ceil(q * n)-th smallest value, computed from the sorted data."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered) - 1e-9) - 1)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_quantiles_are_within_the_relative_error_of_the_exact_ones(seed: int) -> None:
    rng = random.Random(seed)
    # Batch-duration-like data: a log-normal body, some zeros, a few huge outliers.
    values = [round(rng.lognormvariate(7, 0.6)) for _ in range(50_000)] + [0] * 300 + [9_000_000, 12_345_678]
    rng.shuffle(values)
    sketch = QuantileSketch(relative_error=0.01)
    for value in values:
        sketch.add(value)
    assert sketch.count == len(values)
    assert (sketch.min, sketch.max) == (min(values), max(values))
    assert sketch.total / sketch.count == pytest.approx(float(np.mean(values)))
    for q in (0.0, 0.001, 0.005, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0):
        exact = nearest_rank(values, q)
        assert sketch.quantile(q) == pytest.approx(exact, rel=0.01, abs=1e-9), q
    # Memory follows the range of magnitudes, not the count.
    assert sketch.buckets < 1_000


def test_quantiles_of_few_values_follow_nearest_rank() -> None:
    sketch = QuantileSketch()
    assert math.isnan(sketch.quantile(0.5))
    for value in (100, 300, 200, 400):
        sketch.add(value)
    assert sketch.quantile(0.5) == pytest.approx(200, rel=0.01)  # the lower median of an even count
    assert sketch.quantile(0.75) == pytest.approx(300, rel=0.01)
    assert sketch.quantile(0.99) == 400  # the maximum, exactly (estimates are clamped to what was seen)
    assert sketch.quantile(0.0) == 100


def test_bucket_count_stays_bounded_over_a_million_values() -> None:
    sketch = QuantileSketch(relative_error=0.01)
    for i in range(1_000_000):
        sketch.add(1_500 + (i * 7919) % 20_000)
    # 1.5 s to 21.5 s spans log(21500 / 1500) / log(1.0202) ~ 134 buckets.
    assert 100 < sketch.buckets < 140


def test_largest_keeps_the_k_largest_and_the_earliest_of_ties() -> None:
    rng = random.Random(7)
    keys = [rng.randrange(50) for _ in range(5_000)]
    largest: Largest[int] = Largest(5)
    for position, key in enumerate(keys):
        if largest.admits(key):
            largest.add(key, position)
    expected = sorted(range(len(keys)), key=lambda p: (-keys[p], p))[:5]
    assert list(largest) == expected


def test_largest_of_fewer_items_than_k() -> None:
    largest: Largest[str] = Largest(3)
    largest.add(1.0, "a")
    largest.add(2.0, "b")
    assert list(largest) == ["b", "a"]
    assert largest.admits(0.5)
