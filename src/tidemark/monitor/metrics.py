"""Prometheus metrics of the last batch, in the text exposition format, served by a tiny HTTP server."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tidemark.errors import UsageError
from tidemark.monitor.progress import BatchProgress

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
QUARANTINE_OBSERVATION = "tidemark_quarantine"


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


@dataclass
class _QueryState:
    last: BatchProgress | None = None
    received_at: float = 0.0
    batches_total: int = 0
    dropped_total: int = 0
    quarantined_total: int = 0
    stuck: bool = False


@dataclass(frozen=True)
class _Family:
    name: str
    kind: str
    help: str
    samples: tuple[tuple[Mapping[str, str], float], ...]


@dataclass
class MetricsRegistry:
    """The latest figures per query, updated by the monitor thread and rendered on every scrape."""

    _queries: dict[str, _QueryState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, progress: BatchProgress, received_at: float | None = None) -> None:
        """Take one batch's progress as the query's latest."""
        name = progress.name or progress.query_id
        with self._lock:
            state = self._queries.setdefault(name, _QueryState())
            state.last = progress
            state.received_at = time.time() if received_at is None else received_at
            state.batches_total += 1
            state.dropped_total += progress.rows_dropped_by_watermark
            state.quarantined_total += quarantined_count(progress)
            state.stuck = False

    def set_stuck(self, query: str, stuck: bool) -> None:
        """Mark a query as stuck (the watchdog fired) or not."""
        with self._lock:
            self._queries.setdefault(query, _QueryState()).stuck = stuck

    def _families(self) -> list[_Family]:
        rows: dict[str, list[tuple[Mapping[str, str], float]]] = {name: [] for name, _, _ in _FAMILIES}
        with self._lock:
            items = list(self._queries.items())
            for query, state in items:
                q = {"query": query}
                rows["tidemark_stuck"].append((q, 1.0 if state.stuck else 0.0))
                rows["tidemark_batches_total"].append((q, state.batches_total))
                rows["tidemark_rows_dropped_by_watermark_total"].append((q, state.dropped_total))
                rows["tidemark_quarantined_records_total"].append((q, state.quarantined_total))
                if state.last is None:
                    continue
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
                if lag is not None:
                    rows["tidemark_watermark_lag_seconds"].append((q, lag))
                for index, op in enumerate(p.state_operators):
                    o = {**q, "operator": op.operator_name, "operator_id": str(index)}
                    rows["tidemark_state_rows"].append((o, op.num_rows_total))
                    rows["tidemark_state_memory_bytes"].append((o, op.memory_used_bytes))
                    rows["tidemark_state_commit_seconds"].append((o, op.commit_time_ms / 1000))
                    rows["tidemark_state_store_instances"].append((o, op.num_state_store_instances))
                    rows["tidemark_rows_dropped_by_watermark"].append((o, op.num_rows_dropped_by_watermark))
        return [_Family(name, kind, text, tuple(rows[name])) for name, kind, text in _FAMILIES if rows[name]]

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        lines: list[str] = []
        for family in self._families():
            lines.append(f"# HELP {family.name} {family.help}")
            lines.append(f"# TYPE {family.name} {family.kind}")
            lines.extend(f"{family.name}{_labels(labels)} {_number(value)}" for labels, value in family.samples)
        return "\n".join(lines) + "\n"


_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("tidemark_batch_id", "gauge", "Id of the last completed micro-batch."),
    ("tidemark_batch_duration_seconds", "gauge", "Wall-clock duration of the last batch."),
    ("tidemark_batch_phase_seconds", "gauge", "Duration of each phase (Spark durationMs) of the last batch."),
    ("tidemark_input_rows", "gauge", "Input rows of the last batch."),
    ("tidemark_input_rows_per_second", "gauge", "Input rate of the last batch."),
    ("tidemark_processed_rows_per_second", "gauge", "Processing rate of the last batch."),
    ("tidemark_state_rows", "gauge", "Rows held in state by the operator after the last batch."),
    ("tidemark_state_memory_bytes", "gauge", "Memory used by the operator's state stores."),
    ("tidemark_state_commit_seconds", "gauge", "State commit time of the last batch, summed over tasks."),
    ("tidemark_state_store_instances", "gauge", "State store instances (tasks) of the operator."),
    ("tidemark_rows_dropped_by_watermark", "gauge", "Late rows the operator dropped in the last batch."),
    ("tidemark_rows_dropped_by_watermark_total", "counter", "Late rows dropped since the monitor started."),
    ("tidemark_watermark_lag_seconds", "gauge", "Batch start time minus the event-time watermark."),
    ("tidemark_quarantined_records", "gauge", "Malformed records quarantined in the last batch."),
    ("tidemark_quarantined_records_total", "counter", "Malformed records quarantined since the monitor started."),
    ("tidemark_last_progress_timestamp_seconds", "gauge", "Unix time the last batch progress was received."),
    ("tidemark_batches_total", "counter", "Batches completed since the monitor started."),
    ("tidemark_stuck", "gauge", "1 while the watchdog finds no batch completing within stuck_after."),
)


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
        """Bind and serve in the background."""
        try:
            server = ThreadingHTTPServer((self.host, self.requested_port), _handler_for(self.registry))
        except OSError as exc:
            msg = (
                f"cannot serve metrics on {self.host}:{self.requested_port}: {exc.strerror} "
                "(choose another [monitor] metrics_port, or 0 for a free one)"
            )
            raise UsageError(msg) from exc
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="tidemark-metrics", daemon=True)
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
