"""RunMonitor on real queries: the durable log, the metrics endpoint, and the watchdog on a hanging batch."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tidemark.compat import UTC
from tidemark.config import TidemarkConfig, parse_config
from tidemark.formats import read_progress_log
from tidemark.monitor.listener import RunMonitor
from tidemark.monitor.metrics import parse_exposition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.integration
SCHEMA = "user STRING, ts TIMESTAMP, value INT"


def make_config(root: Path, name: str, **monitor: Any) -> TidemarkConfig:
    return parse_config(
        {
            "pipeline": {"name": name},
            "source": {"format": "json", "path": str(root / "in"), "schema": SCHEMA},
            "event_time": {"column": "ts", "watermark": "30 seconds"},
            "aggregation": {"kind": "window", "key": ["user"], "window": "1 minute"},
            "sink": {"format": "console"},
            "checkpoint": {"location": str(root / "ckpt"), "state_store": "hdfs"},
            "quarantine": {"path": str(root / "quarantine")},
            "monitor": {"dir": str(root / "monitor"), **monitor},
        }
    )


def write_inputs(folder: Path, files: list[list[dict[str, Any]]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index, rows in enumerate(files):
        path = folder / f"part-{index:03d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        stamp = 1_700_000_000 + index  # modification order = batch order for maxFilesPerTrigger=1
        os.utime(path, (stamp, stamp))


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return parse_exposition(response.read().decode())


@pytest.mark.slow
def test_log_and_metrics_of_a_real_windowed_query(spark: SparkSession, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    files = [
        [{"user": u, "ts": f"2026-01-01T00:0{m}:{s:02d}Z", "value": s} for u in ("a", "b") for s in (5, 35)]
        for m in range(3)
    ]
    files[1].append({"user": "a", "ts": "2026-01-01T00:01:50Z", "value": "bad"})  # malformed: value is null
    write_inputs(tmp_path / "in", files)
    config = make_config(tmp_path, "monitored", metrics_port=0)
    frame: DataFrame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    frame = frame.observe("tidemark_quarantine", F.count(F.when(F.col("value").isNull(), 1)).alias("count"))
    counts = frame.withWatermark("ts", "30 seconds").groupBy(F.window("ts", "1 minute"), "user").count()

    monitor = RunMonitor(spark, config, "run-metrics")
    monitor.start()
    try:
        assert monitor.metrics_port
        query = (
            counts.writeStream.format("noop")
            .outputMode("append")
            .queryName("monitored")
            .option("checkpointLocation", config.checkpoint.location)
            .trigger(availableNow=True)
            .start()
        )
        monitor.attach(query)
        query.awaitTermination(240)
        last: dict[str, Any] = json.loads(query.lastProgress.json) if query.lastProgress else {}
        assert last, "the query completed no batch"
        q = frozenset({("pipeline", "monitored"), ("run_id", "run-metrics"), ("query", "monitored")})
        samples = wait_for(
            lambda: (s := scrape(monitor.metrics_port or 0)).get(("tidemark_batch_id", q)) == last["batchId"] and s,
            30,
            "the last batch in the metrics",
        )
        op = q | {("operator", last["stateOperators"][0]["operatorName"]), ("operator_id", "0")}
        assert samples[("tidemark_batch_duration_seconds", q)] == pytest.approx(last["batchDuration"] / 1000)
        assert samples[("tidemark_input_rows", q)] == last["numInputRows"]
        assert samples[("tidemark_state_rows", op)] == last["stateOperators"][0]["numRowsTotal"]
        assert samples[("tidemark_state_memory_bytes", op)] == last["stateOperators"][0]["memoryUsedBytes"]
        assert samples[("tidemark_state_commit_seconds", op)] == pytest.approx(
            last["stateOperators"][0]["commitTimeMs"] / 1000
        )
        watermark = datetime.fromisoformat(last["eventTime"]["watermark"].replace("Z", "+00:00"))
        started = datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00"))
        assert samples[("tidemark_watermark_lag_seconds", q)] == pytest.approx((started - watermark).total_seconds())
        assert samples[("tidemark_quarantined_records_total", q)] == 1  # the one bad line written above
        assert samples[("tidemark_last_progress_timestamp_seconds", q)] <= datetime.now(UTC).timestamp()
        monitor.record("warning", message="extra line from the run")
    finally:
        monitor.stop()
        monitor.stop()

    events = read_progress_log(monitor.log_path)
    kinds = [e.type for e in events]
    assert kinds[0] == "started" and kinds.count("terminated") == 1
    assert "warning" in kinds
    committed = sorted(
        int(p.name) for p in (Path(config.checkpoint.location) / "commits").iterdir() if p.name.isdigit()
    )
    batches = [e.progress.batch_id for e in events if e.progress is not None]
    assert batches == committed  # one progress line per committed batch, in order
    assert all(e.run_id == "run-metrics" and e.time.tzinfo is not None for e in events)
    assert events[batches.index(last["batchId"]) + 1].data["progress"] == last  # Spark's JSON, unchanged


def _hanging_query(spark: SparkSession, root: Path, name: str, config: TidemarkConfig) -> Any:
    """A query whose first batch runs a Python UDF that sleeps for two minutes (touching a marker first)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType

    write_inputs(root / "in", [[{"user": "a", "ts": "2026-01-01T00:00:05Z", "value": 1}]])
    marker = str(root / "sleeping")

    def slow(value):  # type: ignore[no-untyped-def]  # no hints: pyspark would try to infer a pandas UDF
        import time as _time
        from pathlib import Path as _Path

        _Path(marker).touch()
        _time.sleep(120)
        return value

    frame = spark.readStream.schema(SCHEMA).json(str(root / "in"))
    counts = frame.select(F.udf(slow, IntegerType())("value").alias("v")).groupBy("v").count()
    return (
        counts.writeStream.format("noop")
        .outputMode("update")
        .queryName(name)
        .option("checkpointLocation", config.checkpoint.location)
        .trigger(processingTime="1 second")
        .start()
    )


def test_watchdog_fires_on_a_hanging_batch_names_it_and_stops_the_query(spark: SparkSession, tmp_path: Path) -> None:
    config = make_config(tmp_path, "hanging", stuck_after="3 seconds", on_stuck="stop")
    monitor = RunMonitor(spark, config, "run-stuck")
    monitor.start()
    began = time.monotonic()
    try:
        query = _hanging_query(spark, tmp_path, "hanging", config)
        monitor.attach(query)
        wait_for(lambda: not query.isActive, 90, "the watchdog to stop the hanging query")
        stopped_after = time.monotonic() - began
    finally:
        if query.isActive:
            query.stop()
        monitor.stop()
    assert stopped_after < 90  # the UDF sleeps 120 s: only the watchdog can have ended the batch this early
    events = read_progress_log(monitor.log_path)
    stuck = [e for e in events if e.type == "stuck"]
    assert len(stuck) == 1
    line = stuck[0].data
    assert line["batch_id"] == 0 and "batch 0" in line["message"]
    assert line["action"] == "stop"
    assert 3 <= line["waiting_seconds"] < 3 + 10  # fired within its limit (check interval + a busy box)
    assert line["checkpoint_files"]["offsets"] >= 1
    assert events[-1].type == "terminated"
    assert monitor.diagnoses and monitor.diagnoses[0].batch_id == 0


def test_diagnosis_names_the_running_stage(spark: SparkSession, tmp_path: Path) -> None:
    config = make_config(tmp_path, "hanging2", stuck_after="10 minutes")
    monitor = RunMonitor(spark, config, "run-diagnose")
    monitor.start()
    try:
        query = _hanging_query(spark, tmp_path, "hanging2", config)
        monitor.attach(query)
        wait_for(lambda: (tmp_path / "sleeping").exists(), 90, "the UDF to start sleeping")
        # Spark's status tracker learns of running tasks from its (asynchronous) listener bus.
        wait_for(
            lambda: any(s.active_tasks >= 1 for s in monitor.diagnose(42.0).running_stages),
            30,
            "the status tracker to report the running task",
        )
        diagnosis = monitor.diagnose(42.0)
        assert diagnosis.batch_id == 0
        assert diagnosis.last_completed_batch is None
        assert diagnosis.query_status.get("isTriggerActive") is True
        assert any(stage.active_tasks >= 1 for stage in diagnosis.running_stages), diagnosis
        assert "running: stage" in diagnosis.message()
    finally:
        query.stop()
        monitor.stop()
