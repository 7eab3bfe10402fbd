"""Per-batch figures of progress records, and their downsampling into a chart's columns of min / mean / max."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tidemark.formats import BatchProgress
from tidemark.monitor.metrics import watermark_lag_seconds
from tidemark.monitor.rocksdb_health import RocksDBBatch

# durationMs keys that are phases of triggerExecution (the whole batch); the remainder is shown as "other".
PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def commit_estimate_ms(progress: BatchProgress, parallelism: int | None = None) -> float:
    """Wall time spent committing state: each operator's commitTimeMs (a sum over tasks) over its concurrent tasks."""
    total = 0.0
    for op in progress.state_operators:
        tasks = max(1, op.num_state_store_instances)
        concurrent = min(tasks, parallelism) if parallelism else tasks
        total += op.commit_time_ms / max(1, concurrent)
    return total


# The figures the report plots per batch, in this order, then (state rows, state memory) per operator.
FIXED_SERIES = (
    "duration",
    *PHASES,
    "other",
    "input_rate",
    "processed_rate",
    "commit_share",
    "watermark_lag",
    "source_lag",
    "rocksdb_memory",
    "rocksdb_cap",
    "rocksdb_miss",
)
DURATION = FIXED_SERIES.index("duration")
PHASE_SERIES = tuple(range(DURATION + 1, DURATION + 2 + len(PHASES)))  # PHASES, then "other"
INPUT_RATE = FIXED_SERIES.index("input_rate")
PROCESSED_RATE = FIXED_SERIES.index("processed_rate")
COMMIT_SHARE = FIXED_SERIES.index("commit_share")
WATERMARK_LAG = FIXED_SERIES.index("watermark_lag")
SOURCE_LAG = FIXED_SERIES.index("source_lag")
ROCKSDB_MEMORY = FIXED_SERIES.index("rocksdb_memory")
ROCKSDB_CAP = FIXED_SERIES.index("rocksdb_cap")
ROCKSDB_MISS = FIXED_SERIES.index("rocksdb_miss")


def state_rows_series(operator: int) -> int:
    """The index of an operator's state rows among a batch's values."""
    return len(FIXED_SERIES) + 2 * operator


def state_memory_series(operator: int) -> int:
    """The index of an operator's state memory among a batch's values."""
    return len(FIXED_SERIES) + 2 * operator + 1


def batch_values(
    progress: BatchProgress, parallelism: int | None = None, rocksdb_cap_bytes: int | None = None
) -> tuple[float | None, ...]:
    """One batch's plotted figures (FIXED_SERIES, then per operator rows and memory); None where there is none.

    Phases are completed with 'other' so they add up to the batch duration; commit share and RocksDB's cache
    miss share are in percent.
    """
    durations = progress.duration_ms
    phases = [durations.get(name, 0) for name in PHASES]
    whole = durations.get("triggerExecution", progress.batch_duration_ms)
    duration = progress.batch_duration_ms
    commit = commit_estimate_ms(progress, parallelism)
    values: list[float | None] = [
        duration,
        *phases,
        max(0, whole - sum(phases)),
        progress.input_rows_per_second,
        progress.processed_rows_per_second,
        min(1.0, commit / duration) * 100 if duration else 0.0,
        watermark_lag_seconds(progress),
        progress.source_lag_total,
    ]
    rocksdb = RocksDBBatch.from_progress(progress, rocksdb_cap_bytes)
    if rocksdb is None:
        values += [None, None, None]
    else:
        values += [rocksdb.memory_bytes, rocksdb.cap_bytes, rocksdb.miss_share * 100]
    for op in progress.state_operators:
        values += (op.num_rows_total, op.memory_used_bytes)
    return tuple(values)


@dataclass(frozen=True)
class Envelope:
    """The lowest, mean and highest value of one series over the batches of a column."""

    low: float
    mean: float
    high: float


@dataclass(frozen=True)
class Column:
    """Consecutive batches drawn as one column: their positions in the run [start, end), ids and envelopes."""

    start: int
    end: int
    first_batch: int
    last_batch: int
    values: tuple[Envelope | None, ...]

    def get(self, series: int) -> Envelope | None:
        """The envelope of one series (None when no batch of the column has it)."""
        return self.values[series] if series < len(self.values) else None


@dataclass(frozen=True)
class RunSeries:
    """A run's plotted figures, downsampled to at most a chart's width of columns."""

    batches: int
    operators: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def per_batch(self) -> bool:
        """Whether every column is a single batch (a short run: nothing was merged)."""
        return all(c.end - c.start == 1 for c in self.columns)


class _Bucket:
    """Running min / sum / count / max per series over consecutive batches."""

    __slots__ = ("counts", "end", "first_batch", "highs", "last_batch", "lows", "start", "sums")

    def __init__(self, start: int, end: int, first_batch: int, last_batch: int) -> None:
        self.start, self.end, self.first_batch, self.last_batch = start, end, first_batch, last_batch
        self.lows: list[float] = []
        self.highs: list[float] = []
        self.sums: list[float] = []
        self.counts: list[int] = []

    @classmethod
    def of_rows(cls, start: int, ids: list[int], rows: list[tuple[float | None, ...]]) -> _Bucket:
        bucket = cls(start, start + len(rows), ids[0], ids[-1])
        width = max(len(row) for row in rows)
        if any(len(row) != width for row in rows):
            rows = [row + (None,) * (width - len(row)) for row in rows]
        for column in zip(*rows, strict=True):
            present = [v for v in column if v is not None]
            if present:
                bucket.lows.append(min(present))
                bucket.highs.append(max(present))
                bucket.sums.append(sum(present))
            else:
                bucket.lows.append(0.0)
                bucket.highs.append(0.0)
                bucket.sums.append(0.0)
            bucket.counts.append(len(present))
        return bucket

    def merged(self, other: _Bucket) -> _Bucket:
        bucket = _Bucket(self.start, other.end, self.first_batch, other.last_batch)
        for index in range(max(len(self.counts), len(other.counts))):
            parts = [b for b in (self, other) if index < len(b.counts) and b.counts[index]]
            bucket.lows.append(min((b.lows[index] for b in parts), default=0.0))
            bucket.highs.append(max((b.highs[index] for b in parts), default=0.0))
            bucket.sums.append(sum(b.sums[index] for b in parts))
            bucket.counts.append(sum(b.counts[index] for b in parts))
        return bucket

    def column(self) -> Column:
        values = tuple(
            Envelope(low, total / count, high) if count else None
            for low, total, count, high in zip(self.lows, self.sums, self.counts, self.highs, strict=True)
        )
        return Column(self.start, self.end, self.first_batch, self.last_batch, values)


class SeriesFold:
    """A run's plotted figures, folded batch by batch into at most `columns` columns of min / mean / max.

    Batches go into buckets of equal width; when 2 x columns buckets are full, neighbours are merged and the
    width doubles. Memory is bounded by the column count, not the batch count, and a single batch's extreme
    survives as its column's low or high.
    """

    def __init__(self, columns: int, parallelism: int | None = None) -> None:
        self._target = max(1, columns)
        self._parallelism = parallelism
        self._width = 1
        self._closed: list[_Bucket] = []
        self._rows: list[tuple[float | None, ...]] = []
        self._ids: list[int] = []
        self._count = 0
        self._operators: list[str] = []

    def add(self, progress: BatchProgress, rocksdb_cap_bytes: int | None = None) -> None:
        """Fold one batch (with the RocksDB cap its progress line records)."""
        for op in progress.state_operators[len(self._operators) :]:
            self._operators.append(op.operator_name)
        self._rows.append(batch_values(progress, self._parallelism, rocksdb_cap_bytes))
        self._ids.append(progress.batch_id)
        self._count += 1
        if len(self._rows) == self._width:
            self._close()

    def _close(self) -> None:
        self._closed.append(_Bucket.of_rows(self._count - len(self._rows), self._ids, self._rows))
        self._rows, self._ids = [], []
        if len(self._closed) == 2 * self._target:
            pairs = zip(self._closed[::2], self._closed[1::2], strict=True)
            self._closed = [a.merged(b) for a, b in pairs]
            self._width *= 2

    def result(self) -> RunSeries:
        """The columns so far (the last one may hold fewer batches)."""
        buckets = list(self._closed)
        if self._rows:
            buckets.append(_Bucket.of_rows(self._count - len(self._rows), self._ids, self._rows))
        if len(buckets) > self._target:
            # Between 1x and 2x the target: regroup into exactly `target` columns of one or two buckets.
            n = len(buckets)
            groups = [buckets[n * i // self._target : n * (i + 1) // self._target] for i in range(self._target)]
            buckets = [functools.reduce(_Bucket.merged, group) for group in groups]
        return RunSeries(self._count, tuple(self._operators), tuple(b.column() for b in buckets))
