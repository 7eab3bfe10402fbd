"""A Grafana dashboard for tidemark's series and Spark's executor memory (`tidemark metrics dashboard`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tidemark.monitor.alerts import promql_duration
from tidemark.sizing.advice import COMMIT_SHARE_HIGH

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'pipeline=~"$pipeline", run_id=~"$run_id"'
BY_QUERY = "pipeline, run_id, query"
BY_OPERATOR = "pipeline, run_id, query, operator"
# Spark names its application tidemark-<pipeline> (tidemark's session factory); executor series carry that name.
SPARK_APP = 'application_name=~"tidemark-$pipeline"'
SIGNS_OF_LIFE = (
    "tidemark_last_progress_timestamp_seconds|tidemark_last_idle_timestamp_seconds|tidemark_run_start_timestamp_seconds"
)


@dataclass(frozen=True)
class Target:
    """One PromQL query of a panel and its legend."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """One time-series or stat panel."""

    title: str
    description: str
    targets: tuple[Target, ...]
    unit: str = "short"
    kind: str = "timeseries"
    threshold: float | None = None
    width: int = 8


@dataclass(frozen=True)
class Row:
    """One row of the dashboard: a concern and its panels."""

    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def _max(by: str, selector: str) -> str:
    return f"max by ({by}) ({selector})"


def rows(window: timedelta = timedelta(minutes=15)) -> tuple[Row, ...]:
    """The dashboard's rows, one per concern."""
    w = promql_duration(window)
    run_legend = "{{pipeline}} {{run_id}}"
    op_legend = "{{pipeline}} {{run_id}} {{operator}}"
    life = '{__name__=~"' + SIGNS_OF_LIFE + '", ' + SEL + "}"
    return (
        Row(
            "Progress and lag",
            (
                Panel(
                    "Run state",
                    "running, or how the run ended (finished, max-duration, signal, requested, failed, stuck)",
                    (
                        Target(
                            f"{_max('pipeline, run_id, state', f'tidemark_run_state{{{SEL}}}')} == 1",
                            "{{run_id}}: {{state}}",
                        ),
                    ),
                    kind="stat",
                    width=6,
                ),
                Panel(
                    "Last batch",
                    "id of the last completed micro-batch",
                    (Target(_max(BY_QUERY, f"tidemark_batch_id{{{SEL}}}"), run_legend),),
                    kind="stat",
                    width=6,
                ),
                Panel(
                    "Batch duration",
                    "wall-clock duration of the last batch",
                    (Target(_max(BY_QUERY, f"tidemark_batch_duration_seconds{{{SEL}}}"), run_legend),),
                    unit="s",
                    width=12,
                ),
                Panel(
                    "Input and processing rate",
                    "rows per second of the last batch, as Spark reports them",
                    (
                        Target(_max(BY_QUERY, f"tidemark_input_rows_per_second{{{SEL}}}"), f"{run_legend} input"),
                        Target(
                            _max(BY_QUERY, f"tidemark_processed_rows_per_second{{{SEL}}}"), f"{run_legend} processed"
                        ),
                    ),
                    unit="rowsps",
                    width=12,
                ),
                Panel(
                    "Watermark lag",
                    "batch start time minus the event-time watermark",
                    (Target(_max(BY_QUERY, f"tidemark_watermark_lag_seconds{{{SEL}}}"), run_legend),),
                    unit="s",
                    width=12,
                ),
            ),
        ),
        Row(
            "State size and commit time",
            (
                Panel(
                    "State rows",
                    "rows each stateful operator holds after the last batch",
                    (Target(_max(BY_OPERATOR, f"tidemark_state_rows{{{SEL}}}"), op_legend),),
                ),
                Panel(
                    "State memory",
                    "memory used by each operator's state stores",
                    (Target(_max(BY_OPERATOR, f"tidemark_state_memory_bytes{{{SEL}}}"), op_legend),),
                    unit="bytes",
                ),
                Panel(
                    "State commit time",
                    "commit time of the last batch per operator, summed over its tasks",
                    (Target(_max(BY_OPERATOR, f"tidemark_state_commit_seconds{{{SEL}}}"), op_legend),),
                    unit="s",
                ),
                Panel(
                    f"Commit share ({w})",
                    f"share of batch time spent committing state over {w}; the line is the planner's threshold",
                    (
                        Target(
                            f"{_max(BY_QUERY, f'increase(tidemark_state_commit_wall_seconds_total{{{SEL}}}[{w}])')}\n"
                            f"/ {_max(BY_QUERY, f'increase(tidemark_batch_duration_seconds_total{{{SEL}}}[{w}])')}",
                            run_legend,
                        ),
                    ),
                    unit="percentunit",
                    threshold=COMMIT_SHARE_HIGH,
                    width=24,
                ),
            ),
        ),
        Row(
            "RocksDB",
            (
                Panel(
                    "RocksDB memory against its cap",
                    "native memory the query's RocksDB state stores report, and the process's cap (bounded memory)",
                    (
                        Target(_max(BY_QUERY, f"tidemark_rocksdb_memory_bytes{{{SEL}}}"), f"{run_legend} used"),
                        Target(_max(BY_QUERY, f"tidemark_rocksdb_memory_cap_bytes{{{SEL}}}"), f"{run_legend} cap"),
                    ),
                    unit="bytes",
                ),
                Panel(
                    "Block cache misses per get",
                    "share of RocksDB gets that missed the block cache in the last batch: climbing batch after batch "
                    "as keys grow, a crawl is coming",
                    (Target(_max(BY_QUERY, f"tidemark_rocksdb_cache_miss_ratio{{{SEL}}}"), run_legend),),
                    unit="percentunit",
                ),
                Panel(
                    "Crawl warning",
                    "1 once the run warned ROCKSDB_CRAWL_AHEAD (its fix names the cap to set)",
                    (Target(_max(BY_QUERY, f"tidemark_rocksdb_crawl_warning{{{SEL}}}"), run_legend),),
                ),
            ),
        ),
        Row(
            "Quarantine",
            (
                Panel(
                    "Quarantined records",
                    "malformed records of the last batch, sent to the quarantine folder",
                    (Target(_max(BY_QUERY, f"tidemark_quarantined_records{{{SEL}}}"), run_legend),),
                ),
                Panel(
                    f"Quarantine share ({w})",
                    f"quarantined records over input records, over {w}",
                    (
                        Target(
                            f"{_max(BY_QUERY, f'increase(tidemark_quarantined_records_total{{{SEL}}}[{w}])')}\n"
                            f"/ {_max(BY_QUERY, f'increase(tidemark_input_rows_total{{{SEL}}}[{w}])')}",
                            run_legend,
                        ),
                    ),
                    unit="percentunit",
                ),
                Panel(
                    "Late rows dropped",
                    "rows each operator dropped in the last batch because they were behind the watermark",
                    (Target(_max(BY_OPERATOR, f"tidemark_rows_dropped_by_watermark{{{SEL}}}"), op_legend),),
                ),
            ),
        ),
        Row(
            "Stuck batches",
            (
                Panel(
                    "Stuck (watchdog)",
                    "1 while tidemark's watchdog finds no batch completing within stuck_after",
                    (Target(_max(BY_QUERY, f"tidemark_stuck{{{SEL}}}"), run_legend),),
                    width=12,
                ),
                Panel(
                    "Since the last batch or idle report",
                    "seconds since the run last showed life, against its stuck_after",
                    (
                        Target(
                            f"time() - {_max('pipeline, run_id', life)}",
                            f"{run_legend} waiting",
                        ),
                        Target(
                            _max("pipeline, run_id", f"tidemark_stuck_after_seconds{{{SEL}}}"),
                            f"{run_legend} stuck_after",
                        ),
                    ),
                    unit="s",
                    width=12,
                ),
            ),
        ),
        Row(
            "Spark executor memory",
            (
                Panel(
                    "JVM heap (peak)",
                    "peak JVM heap per executor (Spark's /metrics/executors/prometheus)",
                    (
                        Target(
                            _max(
                                "application_name, executor_id", f"metrics_executor_JVMHeapMemory_bytes{{{SPARK_APP}}}"
                            ),
                            "{{executor_id}} heap",
                        ),
                        Target(
                            _max("application_name, executor_id", f"metrics_executor_maxMemory_bytes{{{SPARK_APP}}}"),
                            "{{executor_id}} unified max",
                        ),
                    ),
                    unit="bytes",
                ),
                Panel(
                    "Execution and storage memory (peak)",
                    "peak on-heap execution and storage memory per executor",
                    (
                        Target(
                            _max(
                                "application_name, executor_id",
                                f"metrics_executor_OnHeapExecutionMemory_bytes{{{SPARK_APP}}}",
                            ),
                            "{{executor_id}} execution",
                        ),
                        Target(
                            _max(
                                "application_name, executor_id",
                                f"metrics_executor_OnHeapStorageMemory_bytes{{{SPARK_APP}}}",
                            ),
                            "{{executor_id}} storage",
                        ),
                    ),
                    unit="bytes",
                ),
                Panel(
                    "Off-heap and process memory (peak)",
                    "JVM off-heap, and the executor process's RSS (needs spark.executor.processTreeMetrics.enabled; "
                    "RocksDB's native memory shows only there)",
                    (
                        Target(
                            _max(
                                "application_name, executor_id",
                                f"metrics_executor_JVMOffHeapMemory_bytes{{{SPARK_APP}}}",
                            ),
                            "{{executor_id}} JVM off-heap",
                        ),
                        Target(
                            _max(
                                "application_name, executor_id",
                                f"metrics_executor_ProcessTreeJVMRSSMemory_bytes{{{SPARK_APP}}}",
                            ),
                            "{{executor_id}} process RSS",
                        ),
                    ),
                    unit="bytes",
                ),
            ),
        ),
    )


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.threshold is not None:
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": "green", "value": None}, {"color": "red", "value": panel.threshold}],
        }
        defaults["custom"] = {"thresholdsStyle": {"mode": "line"}}
    options: dict[str, Any] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}}
    if panel.kind == "stat":
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "textMode": "auto"}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": [
            {"datasource": DATASOURCE, "expr": t.expr, "legendFormat": t.legend, "refId": chr(ord("A") + i)}
            for i, t in enumerate(panel.targets)
        ],
    }


def _variable(name: str, label: str, query: str, sort: int) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": query,
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": sort,
    }


def dashboard(title: str = "tidemark", uid: str = "tidemark", window: timedelta | None = None) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    panels: list[dict[str, Any]] = []
    y, next_id = 0, 1
    for row in rows(window or timedelta(minutes=15)):
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            }
        )
        next_id, y, x = next_id + 1, y + 1, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y = 0, y + 8
            panels.append(_panel(panel, next_id, x, y))
            next_id, x = next_id + 1, x + panel.width
        y += 8
    return {
        "title": title,
        "uid": uid,
        "description": "tidemark runs: progress, state, quarantine, stuck batches; Spark executor memory",
        "tags": ["tidemark", "spark", "streaming"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "annotations": {"list": []},
        "templating": {
            "list": [
                {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
                _variable("pipeline", "pipeline", "label_values(tidemark_run_state, pipeline)", 1),
                # Run ids start with their UTC start time: descending order puts the newest run first.
                _variable("run_id", "run", 'label_values(tidemark_run_state{pipeline=~"$pipeline"}, run_id)', 2),
            ]
        },
        "panels": panels,
    }


def dashboard_json(title: str = "tidemark", uid: str = "tidemark", window: timedelta | None = None) -> str:
    """The dashboard, as the JSON text Grafana imports."""
    return json.dumps(dashboard(title, uid, window), indent=2) + "\n"


def expressions(model: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard model (panel targets)."""
    return [t["expr"] for p in model["panels"] for t in p.get("targets", [])]
