"""Uncounted state rows are "not tracked", never 0; spans in words a reader takes in (no JVM)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tidemark.durations import in_words
from tidemark.formats import BatchProgress
from tidemark.monitor.analyze import analyze
from tidemark.monitor.metrics import MetricsRegistry


def _progress(batch: int, total: int, updated: int, removed: int = 0, rocksdb: bool = True) -> dict[str, Any]:
    custom = {"rocksdbGetCount": updated} if rocksdb else {"loadedMapCacheHitCount": 1}
    return {
        "id": "q",
        "runId": "r",
        "name": "clicks",
        "timestamp": f"2026-01-01T00:00:{batch:02d}.000Z",
        "batchId": batch,
        "batchDuration": 1000,
        "numInputRows": 10,
        "durationMs": {"triggerExecution": 1000},
        "eventTime": {"watermark": "2026-01-01T00:00:00.000Z"},
        "stateOperators": [
            {
                "operatorName": "stateStoreSave",
                "numRowsTotal": total,
                "numRowsUpdated": updated,
                "numRowsRemoved": removed,
                "customMetrics": custom,
            }
        ],
    }


def _log(path: Path, records: list[dict[str, Any]], started: dict[str, Any] | None = None) -> Path:
    lines = []
    if started is not None:
        lines.append(json.dumps({"type": "started", "time": "2026-01-01T00:00:00.000Z", "run_id": "r1", **started}))
    lines += [
        json.dumps({"type": "progress", "time": "2026-01-01T00:00:01.000Z", "run_id": "r1", "progress": p})
        for p in records
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_rocksdb_batch_that_updated_rows_and_reports_none_in_state_is_untracked() -> None:
    assert BatchProgress.from_json(_progress(0, 0, 5)).state_rows_untracked
    assert not BatchProgress.from_json(_progress(0, 5, 5)).state_rows_untracked
    assert not BatchProgress.from_json(_progress(0, 0, 5, removed=5)).state_rows_untracked  # all evicted: a real 0
    assert not BatchProgress.from_json(_progress(0, 0, 5, rocksdb=False)).state_rows_untracked


@pytest.mark.parametrize("flag", [None, False])
def test_analyze_shows_untracked_rows_as_none_and_judges_no_growth(tmp_path: Path, flag: bool | None) -> None:
    started = None if flag is None else {"state_rows_tracked": flag}
    records = [_progress(b, 0, 10 + b) for b in range(8)]
    (run,) = analyze(_log(tmp_path / "r1.jsonl", records, started)).runs
    assert run.state_rows_tracked is False
    (trend,) = run.state_rows_trend
    assert (trend.first_rows, trend.last_rows, trend.rows_per_batch) == (None, None, None)
    assert not trend.unbounded
    assert [f.code for f in run.findings if f.code.startswith(("STATE_ROWS", "UNBOUNDED"))] == [
        "STATE_ROWS_NOT_TRACKED"
    ]


def test_a_tracked_log_keeps_its_figures(tmp_path: Path) -> None:
    records = [_progress(b, 10 * (b + 1), 10) for b in range(8)]
    (run,) = analyze(_log(tmp_path / "r1.jsonl", records, {"state_rows_tracked": True})).runs
    (trend,) = run.state_rows_trend
    assert (run.state_rows_tracked, trend.first_rows, trend.last_rows, trend.rows_per_batch) == (True, 10, 80, 10.0)
    assert trend.unbounded


def test_prometheus_leaves_untracked_rows_out() -> None:
    tracked = MetricsRegistry("clicks", "r1")
    tracked.update(BatchProgress.from_json(_progress(0, 7, 5)))
    assert 'tidemark_state_rows{pipeline="clicks"' in tracked.render()
    said = MetricsRegistry("clicks", "r1", state_rows_tracked=False)
    said.update(BatchProgress.from_json(_progress(0, 7, 5)))
    seen = MetricsRegistry("clicks", "r1")
    seen.update(BatchProgress.from_json(_progress(0, 0, 5)))
    for registry in (said, seen):
        text = registry.render()
        assert "tidemark_state_rows{" not in text
        assert "tidemark_state_memory_bytes{" in text


def test_spans_in_words() -> None:
    assert [in_words(s) for s in (0, 45, 600, 5.5 * 3600, 28_358_985, -30)] == [
        "0 s",
        "45 s",
        "10 minutes",
        "5.5 hours",
        "328 days",
        "-30 s",
    ]
