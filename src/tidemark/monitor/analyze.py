"""Analysis of a progress log: per run, where batch time went, how state grows, what was dropped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tidemark.monitor.log import EventType, LogEvent, read_log
from tidemark.monitor.metrics import quarantined_count, watermark_lag_seconds
from tidemark.monitor.progress import BatchProgress
from tidemark.monitor.series import commit_estimate_ms, least_squares_slope

HIGH_COMMIT_SHARE = 0.3
DEFAULT_LEAK_BATCHES = 5


@dataclass(frozen=True)
class Finding:
    """One thing worth acting on, with a stable code, a severity, what was seen and what to do."""

    code: str
    severity: str
    run_id: str
    message: str
    fix: str


@dataclass(frozen=True)
class OperatorTrend:
    """How one stateful operator's state evolved over a run."""

    run_id: str
    operator_id: int
    operator: str
    first_rows: int
    last_rows: int
    max_rows: int
    rows_per_batch: float
    rows_removed: int
    last_memory_bytes: int
    max_memory_bytes: int
    growing_batches: int
    unbounded: bool


@dataclass(frozen=True)
class RunAnalysis:
    """The figures of one run (one log file, one tidemark run id)."""

    run_id: str
    query_name: str | None
    query_id: str | None
    started: datetime | None
    ended: datetime | None
    batches: int
    first_batch: int | None
    last_batch: int | None
    input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    total_batch_ms: int
    commit_ms: float
    commit_share: float
    max_batch_commit_share: float
    state_rows_trend: tuple[OperatorTrend, ...]
    dropped_by_watermark: int
    quarantined: int
    watermark_lag_seconds: float | None
    max_watermark_lag_seconds: float | None
    stuck: tuple[dict[str, Any], ...]
    terminated: bool
    exception: str | None
    findings: tuple[Finding, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class LogAnalysis:
    """The whole log (file or folder): totals over runs, then each run."""

    path: str
    batches: int
    commit_share: float
    state_rows_trend: tuple[OperatorTrend, ...]
    dropped_by_watermark: int
    quarantined: int
    findings: tuple[Finding, ...]
    runs: tuple[RunAnalysis, ...]


def group_runs(events: Sequence[LogEvent]) -> list[tuple[str, list[LogEvent]]]:
    """Events grouped by run id, runs in order of first appearance."""
    runs: dict[str, list[LogEvent]] = {}
    for event in events:
        key = event.run_id
        if key is None:
            progress = event.progress
            key = progress.run_id if progress is not None else "unknown"
        runs.setdefault(key, []).append(event)
    return list(runs.items())


def _trends(run_id: str, progress: Sequence[BatchProgress], leak_batches: int) -> tuple[OperatorTrend, ...]:
    count = max((len(p.state_operators) for p in progress), default=0)
    trends = []
    for index in range(count):
        ops = [(p.state_operators[index]) for p in progress if len(p.state_operators) > index]
        rows = [op.num_rows_total for op in ops]
        growing = 0
        # Trailing batches in which state grew and nothing was evicted: a bounded query evicts eventually.
        for position in range(len(ops) - 1, 0, -1):
            if rows[position] > rows[position - 1] and ops[position].num_rows_removed == 0:
                growing += 1
            else:
                break
        trends.append(
            OperatorTrend(
                run_id=run_id,
                operator_id=index,
                operator=ops[0].operator_name,
                first_rows=rows[0],
                last_rows=rows[-1],
                max_rows=max(rows),
                rows_per_batch=round(least_squares_slope([float(r) for r in rows]), 3),
                rows_removed=sum(op.num_rows_removed for op in ops),
                last_memory_bytes=ops[-1].memory_used_bytes,
                max_memory_bytes=max(op.memory_used_bytes for op in ops),
                growing_batches=growing,
                unbounded=growing >= leak_batches,
            )
        )
    return tuple(trends)


def _rates(progress: Sequence[BatchProgress]) -> tuple[int, float, float, int]:
    rows = sum(p.num_input_rows for p in progress)
    total_ms = sum(p.batch_duration_ms for p in progress)
    stamps = [p.timestamp for p in progress if p.timestamp is not None]
    input_rate = 0.0
    if stamps:
        end = max(p.timestamp + timedelta(milliseconds=p.batch_duration_ms) for p in progress if p.timestamp)
        span = (end - min(stamps)).total_seconds()
        input_rate = rows / span if span > 0 else 0.0
    processed_rate = rows / (total_ms / 1000) if total_ms > 0 else 0.0
    return rows, round(input_rate, 3), round(processed_rate, 3), total_ms


def analyze_run(
    run_id: str, events: Sequence[LogEvent], leak_batches: int = DEFAULT_LEAK_BATCHES, parallelism: int | None = None
) -> RunAnalysis:
    """Figures and findings of one run's events."""
    progress = [p for p in (e.progress for e in events) if p is not None]
    rows, input_rate, processed_rate, total_ms = _rates(progress)
    commits = [commit_estimate_ms(p, parallelism) for p in progress]
    shares = [min(1.0, c / p.batch_duration_ms) for c, p in zip(commits, progress, strict=True) if p.batch_duration_ms]
    lags = [lag for lag in (watermark_lag_seconds(p) for p in progress) if lag is not None]
    terminated = [e for e in events if e.type == EventType.TERMINATED]
    started = [e for e in events if e.type == EventType.STARTED]
    exception = next((str(e.data["exception"]) for e in terminated if e.data.get("exception")), None)
    names = [p.name for p in progress if p.name] or [str(e.data.get("name")) for e in started if e.data.get("name")]
    ids = [p.query_id for p in progress] or [str(e.data.get("query_id")) for e in started if e.data.get("query_id")]
    run = RunAnalysis(
        run_id=run_id,
        query_name=names[-1] if names else None,
        query_id=ids[-1] if ids else None,
        started=events[0].time if events else None,
        ended=events[-1].time if events else None,
        batches=len(progress),
        first_batch=progress[0].batch_id if progress else None,
        last_batch=progress[-1].batch_id if progress else None,
        input_rows=rows,
        input_rows_per_second=input_rate,
        processed_rows_per_second=processed_rate,
        total_batch_ms=total_ms,
        commit_ms=round(sum(commits), 3),
        commit_share=round(sum(commits) / total_ms, 4) if total_ms else 0.0,
        max_batch_commit_share=round(max(shares), 4) if shares else 0.0,
        state_rows_trend=_trends(run_id, progress, leak_batches),
        dropped_by_watermark=sum(p.rows_dropped_by_watermark for p in progress),
        quarantined=sum(quarantined_count(p) for p in progress),
        watermark_lag_seconds=round(lags[-1], 3) if lags else None,
        max_watermark_lag_seconds=round(max(lags), 3) if lags else None,
        stuck=tuple(dict(e.data) for e in events if e.type == EventType.STUCK),
        terminated=bool(terminated),
        exception=exception,
    )
    return RunAnalysis(**{**run.__dict__, "findings": findings_for(run)})


def findings_for(run: RunAnalysis) -> tuple[Finding, ...]:
    """What in a run's figures deserves attention."""
    found: list[Finding] = []
    rid = run.run_id
    for stuck in run.stuck:
        batch = stuck.get("batch_id")
        found.append(
            Finding(
                "STUCK_BATCH",
                "error",
                rid,
                str(stuck.get("message") or f"batch {batch} did not complete in time"),
                "look at the running stages named in the diagnosis; a hang in a state commit points at the "
                "checkpoint file system",
            )
        )
    if run.exception:
        first = run.exception.strip().splitlines()[0][:300] if run.exception.strip() else run.exception
        found.append(
            Finding(
                "QUERY_FAILED", "error", rid, f"the query failed: {first}", "fix the cause and rerun; state is kept"
            ),
        )
    for trend in run.state_rows_trend:
        if trend.unbounded:
            found.append(
                Finding(
                    "UNBOUNDED_STATE_GROWTH",
                    "warning",
                    rid,
                    f"operator {trend.operator_id} ({trend.operator}) grew in each of the last {trend.growing_batches}"
                    f" batches without evicting a row ({trend.first_rows} -> {trend.last_rows} rows, "
                    f"{trend.rows_per_batch:+.1f} rows/batch)",
                    "add a watermark on the event-time column (and window/session on it) or a state TTL so old keys "
                    "are evicted",
                )
            )
    if run.commit_share >= HIGH_COMMIT_SHARE:
        found.append(
            Finding(
                "HIGH_COMMIT_SHARE",
                "warning",
                rid,
                f"committing state took {run.commit_share:.0%} of batch time",
                "use RocksDB with changelog checkpointing, or a faster checkpoint file system",
            )
        )
    if run.dropped_by_watermark:
        found.append(
            Finding(
                "ROWS_DROPPED_BY_WATERMARK",
                "info",
                rid,
                f"{run.dropped_by_watermark} late rows were dropped by the watermark (counted after partial "
                "aggregation, so possibly fewer than the late input rows)",
                "raise [event_time] watermark if those late events matter",
            )
        )
    if run.quarantined:
        found.append(
            Finding(
                "QUARANTINED_RECORDS",
                "info",
                rid,
                f"{run.quarantined} malformed records were quarantined",
                "look at the quarantine folder for the raw lines",
            )
        )
    if not run.batches:
        found.append(Finding("NO_BATCHES", "info", rid, "the run completed no batch", "check the source has data"))
    return tuple(found)


def analyze(path: str | Path, leak_batches: int = DEFAULT_LEAK_BATCHES, parallelism: int | None = None) -> LogAnalysis:
    """Analyze a progress log file or a folder of them."""
    runs = tuple(
        analyze_run(run_id, events, leak_batches, parallelism) for run_id, events in group_runs(read_log(path))
    )
    total_ms = sum(r.total_batch_ms for r in runs)
    return LogAnalysis(
        path=str(path),
        batches=sum(r.batches for r in runs),
        commit_share=round(sum(r.commit_ms for r in runs) / total_ms, 4) if total_ms else 0.0,
        state_rows_trend=tuple(t for r in runs for t in r.state_rows_trend),
        dropped_by_watermark=sum(r.dropped_by_watermark for r in runs),
        quarantined=sum(r.quarantined for r in runs),
        findings=tuple(f for r in runs for f in r.findings),
        runs=runs,
    )
