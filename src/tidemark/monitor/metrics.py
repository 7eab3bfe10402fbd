"""Prometheus metrics of the last batch, in the text exposition format, served by a tiny HTTP server."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tidemark.compat import StrEnum
from tidemark.formats import BatchProgress
from tidemark.monitor.rocksdb_health import RocksDBBatch
from tidemark.sizing.advice import batch_commit_ms

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
QUARANTINE_OBSERVATION = "tidemark_quarantine"
_SHUTDOWN_POLL_SECONDS = 0.05


def quarantined_count(progress: BatchProgress) -> int:
    """Malformed records the pipeline's observation counted in this batch (0 without quarantine)."""
    observed = progress.observed_metrics.get(QUARANTINE_OBSERVATION)
    value = observed.get("count") if isinstance(observed, Mapping) else None
    return int(value) if isinstance(value, int | float) else 0


def watermark_lag_seconds(progress: BatchProgress) -> float | None:
    """How far the watermark trails the batch's wall-clock start, in seconds (None before a watermark)."""
    if progress.watermark is None or progress.timestamp is None:
        return None
    return (progress.timestamp - progress.watermark).total_seconds()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class RunState(StrEnum):
    """Where a run is: running, or how it ended (the values of `tidemark_run_state{state}`)."""

    RUNNING = "running"
    FINISHED = "finished"  # available-now: everything there was got processed
    MAX_DURATION = "max-duration"
    SIGNAL = "signal"
    REQUESTED = "requested"
    FAILED = "failed"
    STUCK = "stuck"  # the watchdog stopped the query (on_stuck = "stop")


@dataclass
class _QueryState:
    last: BatchProgress | None = None
    received_at: float = 0.0
    idle_at: float | None = None
    batches_total: int = 0
    dropped_total: int = 0
    quarantined_total: int = 0
    input_rows_total: int = 0
    batch_seconds_total: float = 0.0
    commit_wall_seconds_total: float = 0.0
    stuck: bool = False
    rocksdb: RocksDBBatch | None = None
    crawl: bool = False


@dataclass(frozen=True)
class _Family:
    name: str
    kind: str
    help: str
    samples: tuple[tuple[Mapping[str, str], float], ...]


_Rows = dict[str, list[tuple[Mapping[str, str], float]]]


@dataclass
class MetricsRegistry:
    """The latest figures per query, updated by the monitor thread and rendered on every scrape or push.

    pipeline and run_id, when given, label every sample, so series of different pipelines and runs never mix.
    """

    pipeline: str | None = None
    run_id: str | None = None
    stuck_after_seconds: float | None = None
    # False: RocksDB does not count rows in state; tidemark_state_rows is then left out, never published as 0.
    state_rows_tracked: bool = True
    _queries: dict[str, _QueryState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _state: RunState | None = None
    _started_at: float | None = None
    _ended_at: float | None = None

    @property
    def state(self) -> RunState | None:
        """The run's state (None before begin)."""
        return self._state

    def begin(self, at: float | None = None) -> None:
        """The run started: state running, start time now."""
        with self._lock:
            self._state = RunState.RUNNING
            self._started_at = time.time() if at is None else at
            self._ended_at = None

    def finish(self, state: RunState, at: float | None = None) -> None:
        """The run ended in this state (its final figures stay as they are)."""
        with self._lock:
            self._state = state
            self._ended_at = time.time() if at is None else at
            if self._started_at is None:
                self._started_at = self._ended_at

    def update(
        self,
        progress: BatchProgress,
        received_at: float | None = None,
        rocksdb_cap_bytes: int | None = None,
        crawl: bool = False,
    ) -> None:
        """Take one batch's progress as the query's latest (crawl: the crawl watch fired on it)."""
        name = progress.name or progress.query_id
        rocksdb = RocksDBBatch.from_progress(progress, rocksdb_cap_bytes)
        with self._lock:
            state = self._queries.setdefault(name, _QueryState())
            state.last = progress
            state.received_at = time.time() if received_at is None else received_at
            state.batches_total += 1
            state.dropped_total += progress.rows_dropped_by_watermark
            state.quarantined_total += quarantined_count(progress)
            state.input_rows_total += progress.num_input_rows
            state.batch_seconds_total += progress.batch_duration_ms / 1000
            state.commit_wall_seconds_total += batch_commit_ms(progress, None) / 1000
            state.stuck = False
            if rocksdb is not None:
                state.rocksdb = rocksdb
            state.crawl = state.crawl or crawl

    def add_query(self, query: str) -> None:
        """Export a query's counters (at 0) before its first batch, so rate() and increase() count that batch."""
        with self._lock:
            self._queries.setdefault(query, _QueryState())

    def set_stuck(self, query: str, stuck: bool) -> None:
        """Mark a query as stuck (the watchdog fired) or not."""
        with self._lock:
            self._queries.setdefault(query, _QueryState()).stuck = stuck

    def note_idle(self, query: str, at: float | None = None) -> None:
        """The query reported that it is idle (no new data): it is alive without completing batches."""
        with self._lock:
            self._queries.setdefault(query, _QueryState()).idle_at = time.time() if at is None else at

    def _base(self) -> dict[str, str]:
        labels = {}
        if self.pipeline is not None:
            labels["pipeline"] = self.pipeline
        if self.run_id is not None:
            labels["run_id"] = self.run_id
        return labels

    def _run_rows(self, rows: _Rows, base: Mapping[str, str]) -> None:
        if self._state is not None:
            for state in RunState:
                rows["tidemark_run_state"].append(
                    ({**base, "state": state.value}, 1.0 if state is self._state else 0.0)
                )
        if self._started_at is not None:
            rows["tidemark_run_start_timestamp_seconds"].append((base, self._started_at))
        if self._ended_at is not None:
            rows["tidemark_run_end_timestamp_seconds"].append((base, self._ended_at))
        if self.stuck_after_seconds is not None:
            rows["tidemark_stuck_after_seconds"].append((base, self.stuck_after_seconds))

    def _query_rows(self, rows: _Rows, q: Mapping[str, str], state: _QueryState) -> None:
        rows["tidemark_stuck"].append((q, 1.0 if state.stuck else 0.0))
        rows["tidemark_batches_total"].append((q, state.batches_total))
        rows["tidemark_input_rows_total"].append((q, state.input_rows_total))
        rows["tidemark_batch_duration_seconds_total"].append((q, state.batch_seconds_total))
        rows["tidemark_state_commit_wall_seconds_total"].append((q, state.commit_wall_seconds_total))
        rows["tidemark_rows_dropped_by_watermark_total"].append((q, state.dropped_total))
        rows["tidemark_quarantined_records_total"].append((q, state.quarantined_total))
        if state.idle_at is not None:
            rows["tidemark_last_idle_timestamp_seconds"].append((q, state.idle_at))
        if state.last is None:
            return
        p = state.last
        rows["tidemark_last_progress_timestamp_seconds"].append((q, state.received_at))
        rows["tidemark_batch_id"].append((q, p.batch_id))
        rows["tidemark_batch_duration_seconds"].append((q, p.batch_duration_ms / 1000))
        for phase, millis in sorted(p.duration_ms.items()):
            rows["tidemark_batch_phase_seconds"].append(({**q, "phase": phase}, millis / 1000))
        rows["tidemark_input_rows"].append((q, p.num_input_rows))
        rows["tidemark_input_rows_per_second"].append((q, p.input_rows_per_second))
        rows["tidemark_processed_rows_per_second"].append((q, p.processed_rows_per_second))
        rows["tidemark_quarantined_records"].append((q, quarantined_count(p)))
        lag = watermark_lag_seconds(p)
        if lag is not None and p.watermark is not None:
            rows["tidemark_watermark_lag_seconds"].append((q, lag))
            rows["tidemark_watermark_timestamp_seconds"].append((q, p.watermark.timestamp()))
        for behind in p.source_lag:
            labels = {**q, "topic": behind.partition.topic, "partition": str(behind.partition.partition)}
            rows["tidemark_source_lag_records"].append((labels, behind.lag))
        if state.rocksdb is not None:
            r = state.rocksdb
            rows["tidemark_rocksdb_memory_bytes"].append((q, r.memory_bytes))
            if r.cap_bytes is not None:
                rows["tidemark_rocksdb_memory_cap_bytes"].append((q, r.cap_bytes))
            rows["tidemark_rocksdb_cache_miss_ratio"].append((q, r.miss_share))
            rows["tidemark_rocksdb_get_latency_seconds"].append((q, r.micros_per_get / 1e6))
            rows["tidemark_rocksdb_crawl_warning"].append((q, 1.0 if state.crawl else 0.0))
        for index, op in enumerate(p.state_operators):
            o = {**q, "operator": op.operator_name, "operator_id": str(index)}
            if self.state_rows_tracked and not op.rows_untracked:
                rows["tidemark_state_rows"].append((o, op.num_rows_total))
            rows["tidemark_state_memory_bytes"].append((o, op.memory_used_bytes))
            rows["tidemark_state_commit_seconds"].append((o, op.commit_time_ms / 1000))
            rows["tidemark_state_store_instances"].append((o, op.num_state_store_instances))
            rows["tidemark_rows_dropped_by_watermark"].append((o, op.num_rows_dropped_by_watermark))

    def _families(self) -> list[_Family]:
        rows: _Rows = {name: [] for name, _, _ in FAMILIES}
        base = self._base()
        with self._lock:
            self._run_rows(rows, base)
            for query, state in self._queries.items():
                self._query_rows(rows, {**base, "query": query}, state)
        return [_Family(name, kind, text, tuple(rows[name])) for name, kind, text in FAMILIES if rows[name]]

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        lines: list[str] = []
        for family in self._families():
            lines.append(f"# HELP {family.name} {family.help}")
            lines.append(f"# TYPE {family.name} {family.kind}")
            lines.extend(f"{family.name}{_labels(labels)} {_number(value)}" for labels, value in family.samples)
        return "\n".join(lines) + "\n"


# Every family tidemark exports: (name, type, help). Labels: pipeline and run_id on all (when the registry has
# them), query on per-query ones, operator + operator_id on per-operator ones, phase, state.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("tidemark_run_state", "gauge", "1 for the run's state (running, or how it ended), 0 for the others."),
    ("tidemark_run_start_timestamp_seconds", "gauge", "Unix time the run started."),
    ("tidemark_run_end_timestamp_seconds", "gauge", "Unix time the run ended."),
    ("tidemark_stuck_after_seconds", "gauge", "The watchdog's limit: no batch completing for this long is stuck."),
    ("tidemark_batch_id", "gauge", "Id of the last completed micro-batch."),
    ("tidemark_batch_duration_seconds", "gauge", "Wall-clock duration of the last batch."),
    ("tidemark_batch_phase_seconds", "gauge", "Duration of each phase (Spark durationMs) of the last batch."),
    ("tidemark_input_rows", "gauge", "Input rows of the last batch."),
    ("tidemark_input_rows_per_second", "gauge", "Input rate of the last batch."),
    ("tidemark_processed_rows_per_second", "gauge", "Processing rate of the last batch."),
    (
        "tidemark_state_rows",
        "gauge",
        "Rows held in state by the operator after the last batch (absent when RocksDB does not count them).",
    ),
    ("tidemark_state_memory_bytes", "gauge", "Memory used by the operator's state stores."),
    ("tidemark_state_commit_seconds", "gauge", "State commit time of the last batch, summed over tasks."),
    ("tidemark_state_store_instances", "gauge", "State store instances (tasks) of the operator."),
    ("tidemark_rows_dropped_by_watermark", "gauge", "Late rows the operator dropped in the last batch."),
    (
        "tidemark_rocksdb_memory_bytes",
        "gauge",
        "RocksDB native memory the query's state stores report (memoryUsedBytes of its RocksDB operators).",
    ),
    ("tidemark_rocksdb_memory_cap_bytes", "gauge", "RocksDB's memory cap of the process (bounded memory)."),
    ("tidemark_rocksdb_cache_miss_ratio", "gauge", "Share of RocksDB gets that missed the block cache, last batch."),
    ("tidemark_rocksdb_get_latency_seconds", "gauge", "Mean time of one RocksDB get in the last batch."),
    (
        "tidemark_rocksdb_crawl_warning",
        "gauge",
        "1 once RocksDB's reads went to disk more and more batch after batch in this run (a crawl coming).",
    ),
    ("tidemark_rows_dropped_by_watermark_total", "counter", "Late rows dropped since the run started."),
    ("tidemark_watermark_lag_seconds", "gauge", "Batch start time minus the event-time watermark."),
    ("tidemark_watermark_timestamp_seconds", "gauge", "The event-time watermark of the last batch, as Unix time."),
    ("tidemark_quarantined_records", "gauge", "Malformed records quarantined in the last batch."),
    (
        "tidemark_source_lag_records",
        "gauge",
        "Kafka records not yet read per topic partition after the last batch (its latestOffset minus endOffset).",
    ),
    ("tidemark_quarantined_records_total", "counter", "Malformed records quarantined since the run started."),
    ("tidemark_input_rows_total", "counter", "Input rows (malformed ones included) since the run started."),
    ("tidemark_batch_duration_seconds_total", "counter", "Summed wall-clock duration of the run's batches."),
    (
        "tidemark_state_commit_wall_seconds_total",
        "counter",
        "Estimated wall-clock time the run's batches spent committing state (commitTimeMs over parallel tasks).",
    ),
    ("tidemark_last_progress_timestamp_seconds", "gauge", "Unix time the last batch progress was received."),
    ("tidemark_last_idle_timestamp_seconds", "gauge", "Unix time the query last reported being idle (no new data)."),
    ("tidemark_batches_total", "counter", "Batches completed since the run started."),
    ("tidemark_stuck", "gauge", "1 while the watchdog finds no batch completing within stuck_after."),
)
METRIC_NAMES = frozenset(name for name, _, _ in FAMILIES)


def _handler_for(registry: MetricsRegistry) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is served")
                return
            body = registry.render().encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics: " + format, *args)

    return _Handler


class MetricsServer:
    """Serves /metrics from a daemon thread; port 0 picks a free port (see .port after start)."""

    def __init__(self, registry: MetricsRegistry, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = registry
        self.host = host
        self.requested_port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        """The bound port, once started."""
        return int(self._server.server_address[1]) if self._server is not None else None

    def start(self) -> None:
        """Bind and serve in the background; OSError when the address cannot be bound (e.g. port in use)."""
        server = ThreadingHTTPServer((self.host, self.requested_port), _handler_for(self.registry))
        server.daemon_threads = True
        self._server = server
        # serve_forever checks for shutdown every poll interval (0.5 s by default), and stop() waits for that: at
        # the end of every run. 50 ms keeps the stop short; the idle loop costs nothing measurable.
        self._thread = threading.Thread(
            target=server.serve_forever, args=(_SHUTDOWN_POLL_SECONDS,), name="tidemark-metrics", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Shut the server down; safe to call twice."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def parse_exposition(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Parse simple Prometheus text (as rendered here) into {(name, labels): value}; for tests and tools."""
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels: list[tuple[str, str]] = []
        for part in _split_labels(rest.rstrip("}")):
            key, _, raw = part.partition("=")
            labels.append((key, _unescape(raw[1:-1] if raw.startswith('"') else raw)))
        samples[(name, frozenset(labels))] = float(value)
    return samples


def _unescape(text: str) -> str:
    chars, escaped = [], False
    for char in text:
        if escaped:
            chars.append("\n" if char == "n" else char)
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            chars.append(char)
    return "".join(chars)


def _split_labels(text: str) -> Iterable[str]:
    part, quoted, escaped = "", False, False
    for char in text:
        if escaped:
            part, escaped = part + char, False
        elif char == "\\":
            part, escaped = part + char, True
        elif char == '"':
            part, quoted = part + char, not quoted
        elif char == "," and not quoted:
            yield part
            part = ""
        else:
            part += char
    if part:
        yield part
