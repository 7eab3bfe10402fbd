"""analyze() on recorded progress logs and on tiny hand-made logs whose answers are known."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.progress_logs import write_long_log
from tidemark.cli.main import main
from tidemark.compat import UTC
from tidemark.monitor.analyze import analyze
from tidemark.monitor.report import render_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "progress"
WINDOWED = FIXTURES / "windowed_hdfs.jsonl"
GROWING = FIXTURES / "growing_rocksdb.jsonl"


def raw_progress(path: Path) -> list[dict[str, Any]]:
    """Spark's progress JSON of every progress line, read without tidemark's code."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [line["progress"] for line in lines if line["type"] == "progress"]


def when(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


@pytest.mark.parametrize("path", [WINDOWED, GROWING])
def test_recorded_log_figures_match_hand_computation(path: Path) -> None:
    raw = raw_progress(path)
    run = analyze(path).runs[0]

    assert run.batches == len(raw)
    assert run.input_rows == sum(p["numInputRows"] for p in raw)
    total_ms = sum(p["batchDuration"] for p in raw)
    assert run.total_batch_ms == total_ms
    # commit share: per batch, each operator's summed commit time over its store instances, over all batch time
    commit = sum(op["commitTimeMs"] / op["numStateStoreInstances"] for p in raw for op in p["stateOperators"])
    assert run.commit_share == pytest.approx(commit / total_ms, abs=1e-4)
    assert run.dropped_by_watermark == sum(op["numRowsDroppedByWatermark"] for p in raw for op in p["stateOperators"])
    quarantined = sum(p.get("observedMetrics", {}).get("tidemark_quarantine", {}).get("count", 0) for p in raw)
    assert run.quarantined == quarantined
    assert run.processed_rows_per_second == pytest.approx(run.input_rows / (total_ms / 1000), abs=1e-3)
    start = min(when(p["timestamp"]) for p in raw)
    end = max(when(p["timestamp"]).timestamp() + p["batchDuration"] / 1000 for p in raw)
    assert run.input_rows_per_second == pytest.approx(run.input_rows / (end - start.timestamp()), abs=1e-3)
    rows = [p["stateOperators"][0]["numRowsTotal"] for p in raw]
    trend = run.state_rows_trend[0]
    assert (trend.first_rows, trend.last_rows, trend.max_rows) == (rows[0], rows[-1], max(rows))


def test_recorded_windowed_run_is_bounded_and_reports_its_drops() -> None:
    raw = raw_progress(WINDOWED)
    result = analyze(WINDOWED)
    run = result.runs[0]
    # the recorded run: late minute-0 events arrived after the watermark passed, and one value was malformed
    assert run.dropped_by_watermark == 4
    assert run.quarantined == 1
    assert not run.state_rows_trend[0].unbounded
    last = raw[-1]
    lag = (when(last["timestamp"]) - when(last["eventTime"]["watermark"])).total_seconds()
    assert run.watermark_lag_seconds == pytest.approx(lag)
    codes = {f.code for f in result.findings}
    assert {"ROWS_DROPPED_BY_WATERMARK", "QUARANTINED_RECORDS"} <= codes
    assert "UNBOUNDED_STATE_GROWTH" not in codes


def test_recorded_growing_run_is_flagged_unbounded() -> None:
    raw = raw_progress(GROWING)
    rows = [p["stateOperators"][0]["numRowsTotal"] for p in raw]
    assert all(b > a for a, b in itertools.pairwise(rows))  # the fixture's premise
    result = analyze(GROWING)
    trend = result.runs[0].state_rows_trend[0]
    assert trend.unbounded and trend.growing_batches == len(rows) - 1
    assert trend.rows_removed == 0
    assert result.runs[0].watermark_lag_seconds is None
    assert [f.code for f in result.findings] == ["UNBOUNDED_STATE_GROWTH"]


def _progress(batch: int, duration: int, commits: list[tuple[int, int]], rows: int, removed: int = 0) -> dict[str, Any]:
    return {
        "id": "q",
        "runId": "r",
        "name": "hand",
        "timestamp": f"2026-01-01T00:00:{batch * 10:02d}.000Z",
        "batchId": batch,
        "batchDuration": duration,
        "numInputRows": 10,
        "durationMs": {"triggerExecution": duration, "addBatch": duration // 2},
        "eventTime": {"watermark": "2026-01-01T00:00:00.000Z"},
        "stateOperators": [
            {"operatorName": f"op{i}", "numRowsTotal": rows, "numRowsRemoved": removed, "commitTimeMs": ms}
            | {"numStateStoreInstances": inst, "numRowsDroppedByWatermark": 1}
            for i, (ms, inst) in enumerate(commits)
        ],
    }


def _write(path: Path, lines: list[dict[str, Any]], torn: str = "") -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + torn)
    return path


def test_hand_made_log_commit_share_and_torn_last_line(tmp_path: Path) -> None:
    lines = [
        {"type": "started", "time": "2026-01-01T00:00:00.000Z", "run_id": "r1", "name": "hand"},
        # batch 0: 1000 ms; op0 400 ms over 4 stores = 100, op1 200 ms over 2 stores = 100 -> 200 ms committing
        {
            "type": "progress",
            "time": "2026-01-01T00:00:01Z",
            "run_id": "r1",
            "progress": _progress(0, 1000, [(400, 4), (200, 2)], 5),
        },
        # batch 1: 3000 ms; op0 1200/4 = 300, op1 0 -> 300 ms
        {
            "type": "progress",
            "time": "2026-01-01T00:00:11Z",
            "run_id": "r1",
            "progress": _progress(1, 3000, [(1200, 4), (0, 2)], 5, 2),
        },
    ]
    log = _write(tmp_path / "r1.jsonl", lines, torn='{"type": "progress", "ti')
    run = analyze(log).runs[0]
    assert run.batches == 2
    assert run.commit_share == pytest.approx(500 / 4000)
    assert run.max_batch_commit_share == pytest.approx(0.2)
    assert run.dropped_by_watermark == 4  # one per operator per batch
    # with only 2 task slots, op0's 4 stores commit 2 at a time: 400/2 + 200/2 = 300, 1200/2 = 600
    assert analyze(log, parallelism=2).runs[0].commit_share == pytest.approx(900 / 4000)


def test_folder_of_runs_totals_and_stuck_finding(tmp_path: Path) -> None:
    _write(
        tmp_path / "a.jsonl",
        [
            {
                "type": "progress",
                "time": "2026-01-01T00:00:01Z",
                "run_id": "a",
                "progress": _progress(0, 1000, [(100, 1)], 1),
            }
        ],
    )
    growing = [
        {
            "type": "progress",
            "time": "2026-01-01T00:00:01Z",
            "run_id": "b",
            "progress": _progress(b, 1000, [(0, 1)], 10 * (b + 1)),
        }
        for b in range(4)
    ]
    stuck = {
        "type": "stuck",
        "time": "2026-01-01T00:01:00Z",
        "run_id": "b",
        "batch_id": 4,
        "message": "batch 4 has not completed",
    }
    _write(tmp_path / "b.jsonl", [*growing, stuck])
    (tmp_path / "notes.txt").write_text("not a log")
    result = analyze(tmp_path, leak_batches=3)
    assert [r.run_id for r in result.runs] == ["a", "b"]
    assert result.batches == 5
    assert result.commit_share == pytest.approx(100 / 5000)
    by_code = {f.code: f for f in result.findings}
    assert by_code["STUCK_BATCH"].severity == "error" and "batch 4" in by_code["STUCK_BATCH"].message
    assert by_code["UNBOUNDED_STATE_GROWTH"].run_id == "b"
    assert not analyze(tmp_path, leak_batches=4).runs[1].state_rows_trend[0].unbounded


def test_cli_analyze_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(GROWING), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"batches", "commit_share", "state_rows_trend", "dropped_by_watermark", "runs", "findings"} <= set(data)
    run = data["runs"][0]
    assert {"batches", "commit_share", "state_rows_trend", "dropped_by_watermark"} <= set(run)
    assert set(run["batch_duration_ms"]) == {"mean", "p50", "p90", "p99", "max"}
    assert run["batch_duration_ms"]["max"] == max(p["batchDuration"] for p in raw_progress(GROWING))
    assert {"batch_id", "duration_ms", "timestamp", "commit_ms"} == set(run["slowest_batches"][0])
    assert data["batches"] == len(raw_progress(GROWING))


def test_cli_analyze_missing_log_is_a_failure_not_usage(tmp_path: Path) -> None:
    assert main(["analyze", str(tmp_path / "nope.jsonl")]) == 1


def test_long_log_figures_match_hand_computation(tmp_path: Path) -> None:
    log = write_long_log(tmp_path / "long.jsonl", 20_000, spike_batch=7_777)
    raw = raw_progress(log.path)
    run = analyze(log.path).runs[0]
    durations = np.array([p["batchDuration"] for p in raw])
    assert run.batches == len(raw) == 20_000
    assert run.total_batch_ms == durations.sum()
    stats = run.batch_duration_ms
    assert stats is not None
    assert stats.max == durations.max() == log.spike_duration_ms
    assert stats.mean == pytest.approx(durations.mean(), abs=0.05)
    ordered = np.sort(durations)
    for q, value in ((0.5, stats.p50), (0.9, stats.p90), (0.99, stats.p99)):
        assert value == pytest.approx(ordered[int(np.ceil(q * len(ordered))) - 1], rel=0.01)
    slowest = sorted(raw, key=lambda p: (-p["batchDuration"], p["batchId"]))[:5]
    assert [(b.batch_id, b.duration_ms) for b in run.slowest_batches] == [
        (p["batchId"], p["batchDuration"]) for p in slowest
    ]
    assert run.slowest_batches[0].batch_id == 7_777
    rows = np.array([p["stateOperators"][0]["numRowsTotal"] for p in raw], dtype=float)
    trend = run.state_rows_trend[0]
    assert trend.rows_per_batch == pytest.approx(np.polyfit(np.arange(len(rows)), rows, 1)[0], abs=1e-3)
    assert (trend.first_rows, trend.last_rows, trend.max_rows) == (rows[0], rows[-1], rows.max())
    removed = [p["stateOperators"][0]["numRowsRemoved"] for p in raw]
    assert trend.rows_removed == sum(removed)
    growing = next(i for i in range(len(rows) - 1, 0, -1) if not (rows[i] > rows[i - 1] and removed[i] == 0))
    assert trend.growing_batches == len(rows) - 1 - growing
    commit = sum(op["commitTimeMs"] / op["numStateStoreInstances"] for p in raw for op in p["stateOperators"])
    assert run.commit_share == pytest.approx(commit / durations.sum(), abs=1e-4)
    last = raw[-1]
    lag = (when(last["timestamp"]) - when(last["eventTime"]["watermark"])).total_seconds()
    assert run.watermark_lag_seconds == pytest.approx(lag)
    assert run.dropped_by_watermark == sum(p["stateOperators"][0]["numRowsDroppedByWatermark"] for p in raw)


def test_a_run_in_part_files_reads_as_one_run_in_name_order(tmp_path: Path) -> None:
    whole = write_long_log(tmp_path / "whole.jsonl", 3_000, spike_batch=2_500).path
    lines = whole.read_text().splitlines(keepends=True)
    parts = tmp_path / "parts"
    parts.mkdir()
    # 12 parts named <run_id>.<part>.jsonl: part 2 must come before part 10 although "10" < "2" as text.
    size = len(lines) // 12 + 1
    for part in range(12):
        chunk = lines[part * size : (part + 1) * size]
        torn = '{"type":"progress","time":"2026-' if part == 4 else ""  # a part whose writer died mid-line
        (parts / f"long-run.{part}.jsonl").write_text("".join(chunk) + torn)
    from_parts, from_file = analyze(parts), analyze(whole)
    assert len(from_parts.runs) == 1
    assert from_parts.runs == from_file.runs
    assert from_parts.runs[0].last_batch == 2_999 and from_parts.runs[0].state_rows_trend[0].growing_batches == 0


def test_analysis_memory_does_not_grow_with_the_log(tmp_path: Path) -> None:
    def peak(batches: int) -> int:
        log = write_long_log(tmp_path / f"{batches}.jsonl", batches, spike_batch=batches // 2).path
        tracemalloc.start()
        try:
            render_report(log)  # the analysis and the chart series, in one pass
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(1_000), peak(8_000)
    # Keeping every batch would take 8x here; the folds keep constant-size accumulators and chart columns.
    assert large < 1.3 * small, (small, large)
