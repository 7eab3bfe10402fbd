"""Per-batch series derived from progress records, shared by the analysis and the HTML report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tidemark.monitor.metrics import quarantined_count, watermark_lag_seconds
from tidemark.monitor.progress import BatchProgress

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


def least_squares_slope(values: Sequence[float]) -> float:
    """The slope of the best straight line through values at x = 0, 1, 2, ..."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x = (n - 1) / 2
    mean_y = sum(values) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    den = sum((x - mean_x) ** 2 for x in range(n))
    return num / den


@dataclass(frozen=True)
class BatchPoint:
    """The figures of one batch the report plots."""

    batch_id: int
    duration_ms: int
    phases_ms: dict[str, int]
    input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    commit_ms: float
    commit_share: float
    state_rows: tuple[int, ...]
    state_memory_bytes: tuple[int, ...]
    watermark_lag_seconds: float | None
    dropped_by_watermark: int
    quarantined: int


def batch_points(progress: Sequence[BatchProgress], parallelism: int | None = None) -> list[BatchPoint]:
    """One point per batch, phases completed with 'other' so they add up to the batch duration."""
    points = []
    for p in progress:
        phases = {name: p.duration_ms.get(name, 0) for name in PHASES}
        whole = p.duration_ms.get("triggerExecution", p.batch_duration_ms)
        phases["other"] = max(0, whole - sum(phases.values()))
        commit = commit_estimate_ms(p, parallelism)
        points.append(
            BatchPoint(
                batch_id=p.batch_id,
                duration_ms=p.batch_duration_ms,
                phases_ms=phases,
                input_rows=p.num_input_rows,
                input_rows_per_second=p.input_rows_per_second,
                processed_rows_per_second=p.processed_rows_per_second,
                commit_ms=commit,
                commit_share=min(1.0, commit / p.batch_duration_ms) if p.batch_duration_ms else 0.0,
                state_rows=tuple(op.num_rows_total for op in p.state_operators),
                state_memory_bytes=tuple(op.memory_used_bytes for op in p.state_operators),
                watermark_lag_seconds=watermark_lag_seconds(p),
                dropped_by_watermark=p.rows_dropped_by_watermark,
                quarantined=quarantined_count(p),
            )
        )
    return points
