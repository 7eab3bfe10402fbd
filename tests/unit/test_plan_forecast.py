"""`plan memory --from-log`: the state series of a recorded progress log, the forecast and its JSON."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from tidemark.cli.main import main
from tidemark.config.model import StateStoreKind
from tidemark.errors import UsageError
from tidemark.sizing.forecast import forecast
from tidemark.sizing.measured import MeasuredState, measured_from_log
from tidemark.sizing.memory import MemoryConf
from tidemark.sizing.resident import (
    HDFS_MAP_ENTRY_BYTES,
    HDFS_ROW_OVERHEAD_BYTES,
    RowShape,
    Workload,
    hdfs_footprint,
)
from tidemark.sizing.trend import StatePoint

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plan"
GB = 1024**3


def _progress(name: str) -> list[dict[str, Any]]:
    lines = (FIXTURES / name).read_text().splitlines()
    events = [json.loads(line) for line in lines if line.strip()]
    return [e["progress"] for e in events if e.get("type") == "progress"]


def test_series_and_row_sizes_come_from_the_log() -> None:
    raw = _progress("hdfs.jsonl")
    measured = measured_from_log(FIXTURES / "hdfs.jsonl")
    assert measured.state_store is StateStoreKind.HDFS
    assert [p.rows for p in measured.points] == [p["stateOperators"][0]["numRowsTotal"] for p in raw]
    assert [p.input_rows for p in measured.points] == [p["numInputRows"] for p in raw]
    per_key = statistics.median(
        p["stateOperators"][0]["customMetrics"]["stateOnCurrentVersionSizeBytes"]
        / p["stateOperators"][0]["numRowsTotal"]
        for p in raw
    )
    assert measured.shape is not None
    assert measured.shape.data_bytes == pytest.approx(per_key - HDFS_ROW_OVERHEAD_BYTES - HDFS_MAP_ENTRY_BYTES)
    assert measured.state_instances == raw[-1]["stateOperators"][0]["numStateStoreInstances"]


def test_forecast_of_the_recorded_hdfs_run(capsys: pytest.CaptureFixture[str]) -> None:
    raw = _progress("hdfs.jsonl")
    assert main(["plan", "memory", "--from-log", str(FIXTURES / "hdfs.jsonl"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    result = data["forecast"]
    rows = [p["stateOperators"][0]["numRowsTotal"] for p in raw]
    batches = list(range(len(rows)))
    mean_b, mean_r = statistics.fmean(batches), statistics.fmean(rows)
    slope = sum((b - mean_b) * (r - mean_r) for b, r in zip(batches, rows, strict=True)) / sum(
        (b - mean_b) ** 2 for b in batches
    )
    assert result["growth"]["keys_per_batch"] == pytest.approx(slope)
    assert result["growth"]["keys_now"] == rows[-1]
    point = result["break_point"]
    assert point["limit"] == "heap"
    assert point["limit_bytes"] == 1 * GB  # Spark's default heap when nothing says otherwise
    shape = point["shape"]
    workload = point["workload"]
    # every key written again in the last batches: the updates are the input rows
    assert workload["updated_per_batch"] == raw[-1]["numInputRows"]
    footprint = hdfs_footprint(
        RowShape(shape["key_bytes"], shape["value_bytes"]),
        Workload(workload["keys"], workload["batch_rows"], workload["updated_per_batch"]),
        1 * GB,
    )
    assert point["keys_at_break"] == pytest.approx((GB - footprint.fixed_bytes) / footprint.per_key_bytes, abs=1)
    view = result["outlook"]
    assert view["batches_left"] == pytest.approx((point["keys_at_break"] - rows[-1]) / slope)
    assert "runs out of heap in about" in view["summary"]


def test_forecast_table_prints_the_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "memory", "--from-log", str(FIXTURES / "hdfs.jsonl"), "--executor-memory", "2g"]) == 0
    text = capsys.readouterr().out
    assert "Break point" in text
    assert "forecast: at the current growth of" in text


def test_rocksdb_log_with_bounded_memory_does_not_break_by_keys(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "memory", "--from-log", str(FIXTURES / "rocksdb.jsonl"), "--rocksdb-max-memory", "128m"]
    assert main([*argv, "--container-memory", "2g", "--json"]) == 0
    point = json.loads(capsys.readouterr().out)["forecast"]["break_point"]
    assert point["limit"] == "container"
    assert point["keys_at_break"] is None
    assert point["fits"]


def test_checkpoint_row_sizes_win_over_the_log() -> None:
    log = measured_from_log(FIXTURES / "hdfs.jsonl")
    checkpoint = MeasuredState("ckpt", StateStoreKind.HDFS, (StatePoint(7, 50_000),), RowShape(32, 48, "checkpoint"), 8)
    result = forecast(MemoryConf(executor_memory_bytes=1 * GB), [log, checkpoint])
    assert result.shape_from == "checkpoint"
    assert result.series_from == str(FIXTURES / "hdfs.jsonl")
    assert result.break_point.shape.value_bytes == 48


def test_hdfs_without_row_sizes_asks_for_the_checkpoint() -> None:
    bare = MeasuredState("log", StateStoreKind.HDFS, (StatePoint(0, 10), StatePoint(1, 20)), None, 2)
    with pytest.raises(UsageError, match="--from-checkpoint"):
        forecast(MemoryConf(executor_memory_bytes=1 * GB), [bare])


def test_an_executor_that_does_not_fit_now_gets_one_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's plan said "verdict ok", "does not fit its container memory" and "keys at the break 0" at once."""
    argv = ["plan", "memory", "--from-log", str(FIXTURES / "rocksdb.jsonl"), "--rocksdb-max-memory", "1200m"]
    assert main([*argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    point = plan["forecast"]["break_point"]
    assert not point["fits"] and point["peak_bytes_now"] > point["limit_bytes"]
    assert plan["verdict"] == "over"
    assert any(n.startswith("verdict over: one executor needs") for n in plan["notes"])
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "verdict: over" in text and "past it now: does not fit" in text and "verdict: ok" not in text
    # A small cap fits the same container: the verdict stays execution memory's own.
    assert main([*argv[:-1], "64m", "--json"]) == 0
    fitting = json.loads(capsys.readouterr().out)
    assert fitting["forecast"]["break_point"]["fits"] and fitting["verdict"] == "ok"
