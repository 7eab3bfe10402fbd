"""Prometheus text rendering and the metrics HTTP endpoint (no JVM: progress built from JSON)."""

from __future__ import annotations

import shutil
import subprocess
import urllib.error
import urllib.request
from datetime import datetime

import pytest

from tidemark.compat import UTC
from tidemark.formats import BatchProgress
from tidemark.monitor.metrics import FAMILIES, MetricsRegistry, MetricsServer, RunState, parse_exposition


def _progress(batch: int, name: str = "q1") -> BatchProgress:
    return BatchProgress.from_json(
        {
            "id": "id-1",
            "runId": "run-1",
            "name": name,
            "timestamp": "2026-01-01T00:10:00.000Z",
            "batchId": batch,
            "batchDuration": 1500 + batch,
            "numInputRows": 40,
            "inputRowsPerSecond": 12.5,
            "processedRowsPerSecond": 26.75,
            "durationMs": {"addBatch": 1000, "triggerExecution": 1500 + batch},
            "eventTime": {"watermark": "2026-01-01T00:05:00.000Z", "max": "2026-01-01T00:09:00.000Z"},
            "stateOperators": [
                {
                    "operatorName": "stateStoreSave",
                    "numRowsTotal": 100 * batch,
                    "memoryUsedBytes": 4096,
                    "commitTimeMs": 250,
                    "numStateStoreInstances": 2,
                    "numRowsDroppedByWatermark": 3,
                    "customMetrics": {
                        "rocksdbGetCount": 1000,
                        "rocksdbGetLatency": 5,
                        "rocksdbReadBlockCacheMissCount": 250,
                        "rocksdbReadBlockCacheHitCount": 750,
                        "rocksdbSstFileSize": 2048,
                    },
                }
            ],
            "observedMetrics": {"tidemark_quarantine": {"count": 2, "rows": ["a", "b"]}},
            "sources": [
                {
                    "description": "KafkaV2[Subscribe[clicks]]",
                    "startOffset": {"clicks": {"0": 5, "1": 5}},
                    "endOffset": {"clicks": {"0": 10 * batch, "1": 5}},
                    "latestOffset": {"clicks": {"0": 30, "1": 5}},
                    "metrics": {"maxOffsetsBehindLatest": str(30 - 10 * batch)},
                }
            ],
        }
    )


def test_render_has_the_last_batch_values_and_running_totals() -> None:
    registry = MetricsRegistry()
    registry.update(_progress(1), received_at=1000.0)
    registry.update(_progress(2), received_at=2000.0)
    lag = {
        dict(labels)["partition"]: value
        for (name, labels), value in parse_exposition(registry.render()).items()
        if name == "tidemark_source_lag_records"
    }
    assert lag == {"0": 10, "1": 0}  # latestOffset - endOffset of the last batch, per partition
    registry.note_idle("q1", at=2500.0)
    samples = parse_exposition(registry.render())
    q = frozenset({("query", "q1")})
    op = q | {("operator", "stateStoreSave"), ("operator_id", "0")}
    assert samples[("tidemark_batch_id", q)] == 2
    assert samples[("tidemark_batch_duration_seconds", q)] == pytest.approx(1.502)
    assert samples[("tidemark_input_rows_per_second", q)] == 12.5
    assert samples[("tidemark_processed_rows_per_second", q)] == 26.75
    assert samples[("tidemark_state_rows", op)] == 200
    assert samples[("tidemark_state_memory_bytes", op)] == 4096
    assert samples[("tidemark_state_commit_seconds", op)] == 0.25
    assert samples[("tidemark_rows_dropped_by_watermark", op)] == 3
    assert samples[("tidemark_rows_dropped_by_watermark_total", q)] == 6
    assert samples[("tidemark_watermark_lag_seconds", q)] == 300
    watermark = datetime(2026, 1, 1, 0, 5, tzinfo=UTC).timestamp()
    assert samples[("tidemark_watermark_timestamp_seconds", q)] == watermark
    assert samples[("tidemark_quarantined_records", q)] == 2
    assert samples[("tidemark_quarantined_records_total", q)] == 4
    assert samples[("tidemark_input_rows_total", q)] == 80
    assert samples[("tidemark_batch_duration_seconds_total", q)] == pytest.approx(1.501 + 1.502)
    # the planner's estimate: commitTimeMs over the operator's 2 state store instances, per batch
    assert samples[("tidemark_state_commit_wall_seconds_total", q)] == pytest.approx(2 * 0.25 / 2)
    assert samples[("tidemark_last_progress_timestamp_seconds", q)] == 2000
    assert samples[("tidemark_last_idle_timestamp_seconds", q)] == 2500
    assert samples[("tidemark_batch_phase_seconds", q | {("phase", "addBatch")})] == 1
    assert samples[("tidemark_stuck", q)] == 0
    assert not any(name == "tidemark_run_state" for name, _ in samples)  # no run: no run-level series


def test_every_sample_carries_pipeline_and_run_id_and_the_run_state() -> None:
    registry = MetricsRegistry(pipeline="clicks", run_id="20260101T000000Z-ab12cd", stuck_after_seconds=300)
    registry.begin(at=100.0)
    registry.update(_progress(1, name="clicks"), received_at=160.0)
    running = parse_exposition(registry.render())
    run = frozenset({("pipeline", "clicks"), ("run_id", "20260101T000000Z-ab12cd")})
    assert all(run <= labels for _, labels in running)
    assert running[("tidemark_batch_id", run | {("query", "clicks")})] == 1
    assert running[("tidemark_run_start_timestamp_seconds", run)] == 100
    assert running[("tidemark_stuck_after_seconds", run)] == 300
    states = {dict(labels)["state"]: value for (name, labels), value in running.items() if name == "tidemark_run_state"}
    assert states == {state.value: float(state is RunState.RUNNING) for state in RunState}
    assert ("tidemark_run_end_timestamp_seconds", run) not in running
    registry.finish(RunState.MAX_DURATION, at=400.0)
    ended = parse_exposition(registry.render())
    assert ended[("tidemark_run_state", run | {("state", "max-duration")})] == 1
    assert ended[("tidemark_run_state", run | {("state", "running")})] == 0
    assert ended[("tidemark_run_end_timestamp_seconds", run)] == 400
    assert ended[("tidemark_batch_id", run | {("query", "clicks")})] == 1  # the last figures stay


def test_rocksdb_memory_against_its_cap_and_the_crawl_watch() -> None:
    registry = MetricsRegistry()
    registry.update(_progress(1), rocksdb_cap_bytes=8192)
    samples = parse_exposition(registry.render())
    q = frozenset({("query", "q1")})
    assert samples[("tidemark_rocksdb_memory_bytes", q)] == 4096
    assert samples[("tidemark_rocksdb_memory_cap_bytes", q)] == 8192
    assert samples[("tidemark_rocksdb_cache_miss_ratio", q)] == 0.25
    assert samples[("tidemark_rocksdb_get_latency_seconds", q)] == pytest.approx(5e-6)
    assert samples[("tidemark_rocksdb_crawl_warning", q)] == 0
    registry.update(_progress(2), rocksdb_cap_bytes=8192, crawl=True)
    registry.update(_progress(3), rocksdb_cap_bytes=8192)
    assert parse_exposition(registry.render())[("tidemark_rocksdb_crawl_warning", q)] == 1  # stays for the run
    unbounded = MetricsRegistry()
    unbounded.update(_progress(1))
    assert ("tidemark_rocksdb_memory_cap_bytes", q) not in parse_exposition(unbounded.render())


def test_exposition_passes_promtool_check_metrics() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is needed (Debian package prometheus: make prometheus)"
    registry = MetricsRegistry(pipeline="clicks", run_id="r1", stuck_after_seconds=300)
    registry.begin()
    registry.update(_progress(1, name="clicks"), rocksdb_cap_bytes=256 * 1024**2, crawl=True)
    registry.note_idle("clicks")
    registry.set_stuck("clicks", True)
    registry.finish(RunState.STUCK)
    text = registry.render()
    assert {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")} == {n for n, _, _ in FAMILIES}
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr
    broken = text.replace("tidemark_batches_total", "tidemark_batches")  # a counter without _total: promtool objects
    done = subprocess.run([promtool, "check", "metrics"], input=broken, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0


def test_label_values_are_escaped() -> None:
    registry = MetricsRegistry()
    registry.update(_progress(1, name='we"ird\\name\nx'))
    text = registry.render()
    assert 'query="we\\"ird\\\\name\\nx"' in text
    assert ("tidemark_batch_id", frozenset({("query", 'we"ird\\name\nx')})) in parse_exposition(text)


def test_server_serves_metrics_on_a_free_port_and_stops() -> None:
    registry = MetricsRegistry()
    registry.update(_progress(7))
    registry.set_stuck("q1", True)
    server = MetricsServer(registry, "127.0.0.1", 0)
    server.start()
    try:
        port = server.port
        assert port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            samples = parse_exposition(response.read().decode())
        assert samples[("tidemark_batch_id", frozenset({("query", "q1")}))] == 7
        assert samples[("tidemark_stuck", frozenset({("query", "q1")}))] == 1
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        busy = MetricsServer(registry, "127.0.0.1", port)
        with pytest.raises(OSError, match="in use"):
            busy.start()
    finally:
        server.stop()
        server.stop()
    assert server.port is None


def test_every_way_a_run_stops_is_a_run_state() -> None:
    from tidemark.pipeline.run import StopReason

    assert {reason.value for reason in StopReason} <= {state.value for state in RunState}
