"""Prometheus text rendering and the metrics HTTP endpoint (no JVM: progress built from JSON)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from tidemark.errors import UsageError
from tidemark.monitor.metrics import MetricsRegistry, MetricsServer, parse_exposition
from tidemark.monitor.progress import BatchProgress


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
                }
            ],
            "observedMetrics": {"tidemark_quarantine": {"count": 2, "rows": ["a", "b"]}},
        }
    )


def test_render_has_the_last_batch_values_and_running_totals() -> None:
    registry = MetricsRegistry()
    registry.update(_progress(1), received_at=1000.0)
    registry.update(_progress(2), received_at=2000.0)
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
    assert samples[("tidemark_quarantined_records", q)] == 2
    assert samples[("tidemark_quarantined_records_total", q)] == 4
    assert samples[("tidemark_last_progress_timestamp_seconds", q)] == 2000
    assert samples[("tidemark_batch_phase_seconds", q | {("phase", "addBatch")})] == 1
    assert samples[("tidemark_stuck", q)] == 0


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
        with pytest.raises(UsageError, match="metrics_port"):
            busy.start()
    finally:
        server.stop()
        server.stop()
    assert server.port is None
