"""Reading the progress log: file order, part files, torn and odd lines, the lazy custom metrics."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tidemark.formats import StateOperatorProgress, iter_log, progress_log_files, read_progress


def line(run: str, n: int, **extra: object) -> str:
    return json.dumps({"type": "warning", "time": "2026-01-01T00:00:00.000Z", "run_id": run, "n": n, **extra}) + "\n"


def test_part_files_are_read_in_natural_name_order(tmp_path: Path) -> None:
    for part in (10, 2, 1, 0):
        (tmp_path / f"run-a.{part}.jsonl").write_text(line("run-a", part))
    (tmp_path / "run-a.3.jsonl.tmp").write_text("not a log")
    assert [Path(p).name for p in progress_log_files(tmp_path)] == [f"run-a.{n}.jsonl" for n in (0, 1, 2, 10)]
    assert [e.data["n"] for e in iter_log(tmp_path)] == [0, 1, 2, 10]


def test_torn_lines_are_skipped_and_only_a_torn_middle_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "r.jsonl"
    # A torn line in the middle (a copy cut short), a blank line, then a torn UTF-8 character at the very end.
    log.write_bytes(
        (line("r", 0) + '{"type": "warn' + "\n\n" + line("r", 1) + line("r", 2, note="é")).encode()
        + '{"type":"warning","note":"é'.encode()[:-1]
    )
    with caplog.at_level(logging.WARNING, logger="tidemark.formats.progress_log"):
        events = list(iter_log(log))
    assert [e.data["n"] for e in events] == [0, 1, 2]
    assert events[2].data["note"] == "é"
    assert [r.getMessage() for r in caplog.records] == [f"skipping unreadable line 2 of {log}"]


def test_lines_python_wrote_with_nan_still_parse(tmp_path: Path) -> None:
    log = tmp_path / "r.jsonl"
    log.write_text(json.dumps({"type": "warning", "run_id": "r", "ratio": float("nan"), "big": 2**70}) + "\n")
    (event,) = iter_log(log)
    assert event.data["ratio"] != event.data["ratio"] and event.data["big"] == 2**70


def test_custom_metrics_are_the_numeric_entries_as_floats() -> None:
    raw = {"rocksdbGetCount": 12, "rocksdbPutLatency": 0.5, "label": "x", "nested": {"a": 1}}
    op = StateOperatorProgress.from_json({"operatorName": "s", "customMetrics": raw})
    assert dict(op.custom_metrics) == {"rocksdbGetCount": 12.0, "rocksdbPutLatency": 0.5}
    assert op.custom_metrics == {"rocksdbGetCount": 12.0, "rocksdbPutLatency": 0.5}
    assert len(op.custom_metrics) == 2 and "label" not in op.custom_metrics
    assert op.custom_metrics.get("label") is None and op.custom_metrics["rocksdbGetCount"] == 12.0
    assert StateOperatorProgress.from_json({"operatorName": "s"}).custom_metrics == {}


def test_read_progress_returns_only_batches(tmp_path: Path) -> None:
    log = tmp_path / "r.jsonl"
    progress = {"batchId": 4, "batchDuration": 10}
    log.write_text(line("r", 0) + json.dumps({"type": "progress", "run_id": "r", "progress": progress}) + "\n")
    assert [p.batch_id for p in read_progress(log)] == [4]
