"""Analysis of a progress log: per run, where batch time went, how state grows, what was dropped."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tidemark.formats import BatchProgress, EventType, LogEvent, StateOperatorProgress, is_record, iter_log, no_records
from tidemark.monitor.metrics import quarantined_count
from tidemark.monitor.rocksdb_health import CrawlWarning, CrawlWatch
from tidemark.monitor.series import commit_estimate_ms
from tidemark.monitor.sketch import Largest, QuantileSketch

HIGH_COMMIT_SHARE = 0.3
DEFAULT_LEAK_BATCHES = 5
SLOWEST_BATCHES = 5


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
    # None when the store does not count its rows (RocksDB, trackTotalNumberOfRows off): "not tracked", never 0.
    first_rows: int | None
    last_rows: int | None
    max_rows: int | None
    rows_per_batch: float | None
    rows_removed: int
    last_memory_bytes: int
    max_memory_bytes: int
    growing_batches: int
    unbounded: bool


@dataclass(frozen=True)
class DurationStats:
    """Batch durations of a run in ms: mean, quantiles (within 1%, from a bounded sketch) and the maximum."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: float


@dataclass(frozen=True)
class SlowBatch:
    """One of a run's slowest batches."""

    batch_id: int
    duration_ms: int
    timestamp: datetime | None
    commit_ms: float


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
    batch_duration_ms: DurationStats | None = None
    slowest_batches: tuple[SlowBatch, ...] = ()
    # Kafka sources: records not yet read per topic partition after the last batch, and the largest total lag.
    source_lag: dict[str, int] | None = None
    max_source_lag: int | None = None
    findings: tuple[Finding, ...] = ()
    # False: the state store did not count rows in state (the run's log says so, or its figures show it).
    state_rows_tracked: bool | None = None
    rocksdb: RocksDBSummary | None = None
    rocksdb_crawl: CrawlWarning | None = None


@dataclass(frozen=True)
class RocksDBSummary:
    """A run's RocksDB memory against its cap, and how its reads went (RocksDB operators summed)."""

    cap_bytes: int | None  # recorded by tidemark run on every progress line
    last_memory_bytes: int
    max_memory_bytes: int
    last_cache_miss_share: float
    max_cache_miss_share: float
    last_micros_per_get: float


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


def state_rows_text(trend: OperatorTrend) -> str:
    """'120 -> 480 rows (+24.0/batch)', or 'not tracked (...)' when the store did not count them."""
    if trend.first_rows is None or trend.last_rows is None or trend.rows_per_batch is None:
        return "rows not tracked (set [checkpoint] track_state_rows = true, or count them: tidemark state stats)"
    return f"{trend.first_rows:,} -> {trend.last_rows:,} rows ({trend.rows_per_batch:+.1f}/batch)"


def log_records(path: str | Path) -> Iterator[LogEvent]:
    """Every record of a progress log, streamed; an InputError at the end when there was none (no log file, an
    empty log, or a file that is not a progress log), never an empty analysis."""
    seen = False
    for event in iter_log(path):
        if is_record(event):
            seen = True
            yield event
    if not seen:
        raise no_records(path)


def run_events(events: Iterable[LogEvent]) -> Iterator[tuple[str, LogEvent, BatchProgress | None]]:
    """Each event with the run it belongs to and its batch progress (parsed once)."""
    for event in events:
        progress = event.progress
        key = event.run_id
        if key is None:
            key = progress.run_id if progress is not None else "unknown"
        yield key, event, progress


class _OperatorFold:
    """One operator's trend, folded batch by batch in constant memory."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.first_rows: int | None = None
        self.last_rows = 0
        self.max_rows = 0
        self.rows_removed = 0
        self.last_memory = 0
        self.max_memory = 0
        self.growing = 0
        # Exact integer sums for the least-squares slope of rows over x = 0, 1, 2, ...
        self.n = 0
        self.sum_y = 0
        self.sum_xy = 0

    def add(self, op: StateOperatorProgress) -> None:
        rows = op.num_rows_total
        if self.first_rows is None:
            self.first_rows = self.max_rows = rows
        else:
            # Trailing batches in which state grew and nothing was evicted: a bounded query evicts eventually.
            self.growing = self.growing + 1 if rows > self.last_rows and op.num_rows_removed == 0 else 0
            self.max_rows = max(self.max_rows, rows)
        self.last_rows = rows
        self.rows_removed += op.num_rows_removed
        self.last_memory = op.memory_used_bytes
        self.max_memory = max(self.max_memory, op.memory_used_bytes)
        self.sum_xy += self.n * rows
        self.sum_y += rows
        self.n += 1

    def slope(self) -> float:
        n = self.n
        if n < 2:
            return 0.0
        sum_x, sum_xx = n * (n - 1) // 2, (n - 1) * n * (2 * n - 1) // 6
        return (n * self.sum_xy - sum_x * self.sum_y) / (n * sum_xx - sum_x * sum_x)

    def trend(self, run_id: str, index: int, leak_batches: int, tracked: bool = True) -> OperatorTrend:
        return OperatorTrend(
            run_id=run_id,
            operator_id=index,
            operator=self.name,
            first_rows=(self.first_rows or 0) if tracked else None,
            last_rows=self.last_rows if tracked else None,
            max_rows=self.max_rows if tracked else None,
            rows_per_batch=round(self.slope(), 3) if tracked else None,
            rows_removed=self.rows_removed,
            last_memory_bytes=self.last_memory,
            max_memory_bytes=self.max_memory,
            growing_batches=self.growing if tracked else 0,
            unbounded=tracked and self.growing >= leak_batches,
        )


class RunFold:
    """The figures of one run, folded event by event.

    Memory does not grow with the number of batches: only the watchdog's `stuck` lines (one per stuck episode)
    are kept whole.
    """

    def __init__(self, run_id: str, leak_batches: int = DEFAULT_LEAK_BATCHES, parallelism: int | None = None) -> None:
        self.run_id = run_id
        self.leak_batches = leak_batches
        self.parallelism = parallelism
        self.first_time: datetime | None = None
        self.last_time: datetime | None = None
        self.batches = 0
        self.first_batch: int | None = None
        self.last_batch: int | None = None
        self.input_rows = 0
        self.total_ms = 0
        self.commit_ms = 0.0
        self.max_share = 0.0
        self.first_start: datetime | None = None
        self.last_end: datetime | None = None
        self.operators: list[_OperatorFold] = []
        self.dropped = 0
        self.quarantined = 0
        self.last_lag: float | None = None
        self.max_lag: float | None = None
        self.last_source_lag: dict[str, int] | None = None
        self.max_source_lag: int | None = None
        self.stuck: list[dict[str, Any]] = []
        self.terminated = False
        self.exception: str | None = None
        self.progress_name: str | None = None
        self.started_name: str | None = None
        self.progress_query_id: str | None = None
        self.started_query_id: str | None = None
        self.durations = QuantileSketch()
        self.slowest: Largest[SlowBatch] = Largest(SLOWEST_BATCHES)
        self.rows_tracked_said: bool | None = None  # what the run's started line says
        self.rows_untracked_seen = False
        self.crawl = CrawlWatch(active_partitions=parallelism)
        self.rocksdb_cap: int | None = None
        self.rocksdb_max_memory = 0
        self.rocksdb_max_miss = 0.0

    def add(self, event: LogEvent, progress: BatchProgress | None = None) -> None:
        """Fold one event of this run (progress: event.progress, when the caller already has it)."""
        if self.first_time is None:
            self.first_time = event.time
        self.last_time = event.time
        if progress is not None:
            self._add_progress(progress)
            self._add_rocksdb(progress, event.rocksdb_cap_bytes)
        elif event.type == EventType.STARTED:
            if event.data.get("name"):
                self.started_name = str(event.data["name"])
            if event.data.get("query_id"):
                self.started_query_id = str(event.data["query_id"])
            if isinstance(event.data.get("state_rows_tracked"), bool):
                self.rows_tracked_said = bool(event.data["state_rows_tracked"])
        elif event.type == EventType.TERMINATED:
            self.terminated = True
            if self.exception is None and event.data.get("exception"):
                self.exception = str(event.data["exception"])
        elif event.type == EventType.STUCK:
            self.stuck.append(dict(event.data))

    def _add_progress(self, p: BatchProgress) -> None:
        self.batches += 1
        if self.first_batch is None:
            self.first_batch = p.batch_id
        self.last_batch = p.batch_id
        if p.name:
            self.progress_name = p.name
        self.progress_query_id = p.query_id
        duration = p.batch_duration_ms
        self.input_rows += p.num_input_rows
        self.total_ms += duration
        start = p.timestamp
        if start is not None:
            end = start + timedelta(milliseconds=duration)
            if self.first_start is None or start < self.first_start:
                self.first_start = start
            if self.last_end is None or end > self.last_end:
                self.last_end = end
        commit = commit_estimate_ms(p, self.parallelism)
        self.commit_ms += commit
        if duration and commit / duration > self.max_share:
            self.max_share = min(1.0, commit / duration)
        self.durations.add(duration)
        if self.slowest.admits(duration):
            self.slowest.add(duration, SlowBatch(p.batch_id, duration, start, round(commit, 3)))
        operators = self.operators
        self.rows_untracked_seen = self.rows_untracked_seen or p.state_rows_untracked
        for index, op in enumerate(p.state_operators):
            if index == len(operators):
                operators.append(_OperatorFold(op.operator_name))
            operators[index].add(op)
            self.dropped += op.num_rows_dropped_by_watermark
        self.quarantined += quarantined_count(p)
        lags = p.source_lag
        if lags:
            self.last_source_lag = {str(lag.partition): lag.lag for lag in lags}
            total = sum(self.last_source_lag.values())
            self.max_source_lag = total if self.max_source_lag is None else max(self.max_source_lag, total)
        watermark = p.watermark
        if watermark is not None and start is not None:
            lag = (start - watermark).total_seconds()
            self.last_lag = lag
            if self.max_lag is None or lag > self.max_lag:
                self.max_lag = lag

    def _add_rocksdb(self, progress: BatchProgress, cap: int | None) -> None:
        self.crawl.observe(progress, cap)
        last = self.crawl.last
        if last is not None and last.batch_id == progress.batch_id:
            self.rocksdb_cap = cap or self.rocksdb_cap
            self.rocksdb_max_memory = max(self.rocksdb_max_memory, last.memory_bytes)
            self.rocksdb_max_miss = max(self.rocksdb_max_miss, last.miss_share)

    def _rocksdb(self) -> RocksDBSummary | None:
        last = self.crawl.last
        if last is None:
            return None
        return RocksDBSummary(
            cap_bytes=self.rocksdb_cap,
            last_memory_bytes=last.memory_bytes,
            max_memory_bytes=self.rocksdb_max_memory,
            last_cache_miss_share=round(last.miss_share, 4),
            max_cache_miss_share=round(self.rocksdb_max_miss, 4),
            last_micros_per_get=round(last.micros_per_get, 3),
        )

    def _rates(self) -> tuple[float, float]:
        input_rate = 0.0
        if self.first_start is not None and self.last_end is not None:
            span = (self.last_end - self.first_start).total_seconds()
            input_rate = self.input_rows / span if span > 0 else 0.0
        processed_rate = self.input_rows / (self.total_ms / 1000) if self.total_ms > 0 else 0.0
        return round(input_rate, 3), round(processed_rate, 3)

    def _durations(self) -> DurationStats | None:
        if not self.durations.count:
            return None
        sketch = self.durations
        return DurationStats(
            mean=round(sketch.total / sketch.count, 1),
            p50=round(sketch.quantile(0.5), 1),
            p90=round(sketch.quantile(0.9), 1),
            p99=round(sketch.quantile(0.99), 1),
            max=sketch.max,
        )

    def result(self) -> RunAnalysis:
        """The run's figures and findings so far."""
        input_rate, processed_rate = self._rates()
        total_ms = self.total_ms
        tracked = self.rows_tracked_said
        if tracked is None and self.operators:
            tracked = not self.rows_untracked_seen
        run = RunAnalysis(
            run_id=self.run_id,
            query_name=self.progress_name or self.started_name,
            query_id=self.progress_query_id if self.batches else self.started_query_id,
            started=self.first_time,
            ended=self.last_time,
            batches=self.batches,
            first_batch=self.first_batch,
            last_batch=self.last_batch,
            input_rows=self.input_rows,
            input_rows_per_second=input_rate,
            processed_rows_per_second=processed_rate,
            total_batch_ms=total_ms,
            commit_ms=round(self.commit_ms, 3),
            commit_share=round(self.commit_ms / total_ms, 4) if total_ms else 0.0,
            max_batch_commit_share=round(self.max_share, 4),
            state_rows_trend=tuple(
                op.trend(self.run_id, index, self.leak_batches, tracked is not False)
                for index, op in enumerate(self.operators)
            ),
            dropped_by_watermark=self.dropped,
            quarantined=self.quarantined,
            watermark_lag_seconds=round(self.last_lag, 3) if self.last_lag is not None else None,
            max_watermark_lag_seconds=round(self.max_lag, 3) if self.max_lag is not None else None,
            stuck=tuple(self.stuck),
            terminated=self.terminated,
            exception=self.exception,
            batch_duration_ms=self._durations(),
            slowest_batches=tuple(self.slowest),
            state_rows_tracked=tracked,
            source_lag=self.last_source_lag,
            max_source_lag=self.max_source_lag,
            rocksdb=self._rocksdb(),
            rocksdb_crawl=self.crawl.warning,
        )
        return replace(run, findings=findings_for(run))


def analyze_run(
    run_id: str,
    events: Iterable[LogEvent],
    leak_batches: int = DEFAULT_LEAK_BATCHES,
    parallelism: int | None = None,
) -> RunAnalysis:
    """Figures and findings of one run's events."""
    fold = RunFold(run_id, leak_batches, parallelism)
    for event in events:
        fold.add(event)
    return fold.result()


def describe_source_lag(lag: dict[str, int] | None, limit: int = 12) -> str:
    """`1,200 records: clicks-0 800, clicks-1 400` (partitions with the most lag first)."""
    if not lag:
        return "-"
    ordered = sorted(lag.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{name} {value:,}" for name, value in ordered[:limit])
    more = f" (and {len(ordered) - limit} more partitions)" if len(ordered) > limit else ""
    return f"{sum(lag.values()):,} records: {shown}{more}"


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
    if run.state_rows_tracked is False and run.state_rows_trend:
        found.append(
            Finding(
                "STATE_ROWS_NOT_TRACKED",
                "info",
                rid,
                "the state store did not count the rows in state (RocksDB with trackTotalNumberOfRows off, "
                "tidemark's default for window and session aggregations): state growth cannot be judged from this log",
                "set [checkpoint] track_state_rows = true (one read before every state write), or count them with "
                "'tidemark state stats CHECKPOINT'",
            )
        )
    if run.rocksdb_crawl is not None:
        crawl = run.rocksdb_crawl
        found.append(Finding(crawl.code, "warning", rid, crawl.message, crawl.fix))
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


def analyze_events(
    events: Iterable[LogEvent], leak_batches: int = DEFAULT_LEAK_BATCHES, parallelism: int | None = None
) -> tuple[RunAnalysis, ...]:
    """Every run of a stream of events, in order of first appearance; one pass, memory constant per run."""
    folds: dict[str, RunFold] = {}
    for run_id, event, progress in run_events(events):
        fold = folds.get(run_id)
        if fold is None:
            fold = folds[run_id] = RunFold(run_id, leak_batches, parallelism)
        fold.add(event, progress)
    return tuple(fold.result() for fold in folds.values())


def summarize(path: str | Path, runs: Sequence[RunAnalysis]) -> LogAnalysis:
    """The whole log's totals over its runs."""
    total_ms = sum(r.total_batch_ms for r in runs)
    return LogAnalysis(
        path=str(path),
        batches=sum(r.batches for r in runs),
        commit_share=round(sum(r.commit_ms for r in runs) / total_ms, 4) if total_ms else 0.0,
        state_rows_trend=tuple(t for r in runs for t in r.state_rows_trend),
        dropped_by_watermark=sum(r.dropped_by_watermark for r in runs),
        quarantined=sum(r.quarantined for r in runs),
        findings=tuple(f for r in runs for f in r.findings),
        runs=tuple(runs),
    )


def analyze(path: str | Path, leak_batches: int = DEFAULT_LEAK_BATCHES, parallelism: int | None = None) -> LogAnalysis:
    """Analyze a progress log file or a folder of them, in one streaming pass."""
    return summarize(path, analyze_events(log_records(path), leak_batches, parallelism))
