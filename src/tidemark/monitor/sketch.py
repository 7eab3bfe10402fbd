"""Bounded-memory summaries of a stream of numbers: quantiles within a relative error, and the k largest."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_RELATIVE_ERROR = 0.01


class QuantileSketch:
    """Quantiles of non-negative values in log-spaced buckets (the DDSketch idea).

    A value v > 0 falls in bucket ceil(log(v) / log(g)), g = (1 + e) / (1 - e); a bucket's estimate is within
    e (relative) of every value in it, so a quantile is within e of the true value at that rank. The number
    of buckets grows with log(max / min), not with the count: about 1,000 for 1 ms to 11 days at e = 1%.
    """

    def __init__(self, relative_error: float = DEFAULT_RELATIVE_ERROR) -> None:
        self.relative_error = relative_error
        self._gamma = (1 + relative_error) / (1 - relative_error)
        self._log_gamma = math.log(self._gamma)
        self._buckets: dict[int, int] = {}
        self._zeros = 0
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float) -> None:
        """Count one value (negative values count as 0)."""
        self.count += 1
        self.total += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        if value <= 0:
            self._zeros += 1
            return
        key = math.ceil(math.log(value) / self._log_gamma)
        self._buckets[key] = self._buckets.get(key, 0) + 1

    @property
    def buckets(self) -> int:
        """How many buckets are in use (the memory it takes)."""
        return len(self._buckets) + (1 if self._zeros else 0)

    def quantile(self, q: float) -> float:
        """The q-quantile by nearest rank (the ceil(q * count)-th smallest value), within the relative error.

        NaN when empty. q = 0.5 of an even count is the lower median; the smallest and largest ranks are exact.
        """
        if not self.count:
            return math.nan
        # The epsilon keeps float error from rounding up: 0.9 * 10 is 9.000000000000002.
        rank = max(0, math.ceil(min(1.0, max(0.0, q)) * self.count - 1e-9) - 1)
        if rank == self.count - 1:
            return self.max
        if rank < self._zeros:
            return max(0.0, self.min)
        if rank == 0:
            return self.min
        seen = self._zeros
        for key in sorted(self._buckets):
            seen += self._buckets[key]
            if seen > rank:
                estimate = 2 * self._gamma**key / (self._gamma + 1)
                return min(self.max, max(self.min, estimate))
        return self.max


class Largest(Generic[T]):
    """The k largest items of a stream by a numeric key; ties keep the earliest."""

    def __init__(self, k: int) -> None:
        self.k = k
        self._heap: list[tuple[float, int, T]] = []
        self._seen = 0

    def admits(self, key: float) -> bool:
        """Whether an item with this key would be kept (to skip building items that would not)."""
        return len(self._heap) < self.k or key > self._heap[0][0]

    def add(self, key: float, item: T) -> None:
        """Offer one item."""
        self._seen += 1
        # -seen: among equal keys the later item is the smaller one, so the earliest survives.
        entry = (key, -self._seen, item)
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, entry)
        elif entry > self._heap[0]:
            heapq.heapreplace(self._heap, entry)

    def __iter__(self) -> Iterator[T]:
        """The kept items, largest first."""
        return iter([item for _, _, item in sorted(self._heap, reverse=True)])
