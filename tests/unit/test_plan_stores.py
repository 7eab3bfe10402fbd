"""plan checkpoint compares RocksDB with the HDFS-backed store from runs of both in one progress log."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from tidemark.sizing.load import ConfOverrides
from tidemark.sizing.planner import advise_checkpoint_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plan"


def _lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


def _median_batch(lines: list[dict[str, Any]]) -> float:
    durations = [ln["progress"]["batchDuration"] for ln in lines if ln["type"] == "progress"]
    return statistics.median(durations[1:])


def _write(path: Path, *runs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for run in runs for line in run), encoding="utf-8")
    return path


def test_rocksdb_faster_than_hdfs_at_the_same_size_is_reported_as_info(tmp_path: Path) -> None:
    hdfs, rocksdb = _lines("hdfs.jsonl"), _lines("rocksdb_changelog.jsonl")
    advice = advise_checkpoint_log(_write(tmp_path / "both.jsonl", hdfs, rocksdb), overrides=ConfOverrides(cores=2))
    (comparison,) = advice.store_comparisons
    assert comparison.rocksdb.median_batch_ms == _median_batch(rocksdb)
    assert comparison.hdfs.median_batch_ms == _median_batch(hdfs)
    assert comparison.ratio < 1
    codes = [f.code for f in advice.findings]
    assert "ROCKSDB_NOT_SLOWER" in codes and "ROCKSDB_SLOWER_THAN_HDFS" not in codes


def test_rocksdb_slower_than_hdfs_says_so_with_the_numbers(tmp_path: Path) -> None:
    hdfs, rocksdb = _lines("hdfs.jsonl"), _lines("rocksdb_changelog.jsonl")
    for line in rocksdb:
        if line["type"] == "progress":
            line["progress"]["batchDuration"] *= 4
    advice = advise_checkpoint_log(_write(tmp_path / "both.jsonl", rocksdb, hdfs), overrides=ConfOverrides(cores=2))
    (finding,) = [f for f in advice.findings if f.code == "ROCKSDB_SLOWER_THAN_HDFS"]
    ratio = _median_batch(rocksdb) / _median_batch(hdfs)
    assert ratio > 1
    assert f"{ratio:.2f}x" in finding.message
    assert (
        f"{_median_batch(rocksdb):,.0f} ms" in finding.message and f"{_median_batch(hdfs):,.0f} ms" in finding.message
    )
    rows = [
        sum(max(op["numRowsTotal"], op["numRowsUpdated"]) for op in ln["progress"]["stateOperators"])
        for ln in rocksdb
        if ln["type"] == "progress"
    ]
    assert f"at {int(statistics.median(rows[1:])):,} state rows" in finding.message
    assert "state_store = 'hdfs'" in finding.fix
    assert finding.severity.value == "warning"


def test_runs_of_different_sizes_are_not_compared(tmp_path: Path) -> None:
    hdfs, rocksdb = _lines("hdfs.jsonl"), _lines("rocksdb_changelog.jsonl")
    for line in rocksdb:
        if line["type"] == "progress":
            for op in line["progress"]["stateOperators"]:
                op["numRowsTotal"] *= 2
                op["numRowsUpdated"] *= 2
    advice = advise_checkpoint_log(_write(tmp_path / "both.jsonl", hdfs, rocksdb), overrides=ConfOverrides(cores=2))
    assert advice.store_comparisons == ()
    assert not any(f.code.startswith("ROCKSDB_") for f in advice.findings)


def test_a_single_store_log_gives_no_comparison() -> None:
    advice = advise_checkpoint_log(FIXTURES / "rocksdb_changelog.jsonl", overrides=ConfOverrides(cores=2))
    assert advice.store_comparisons == ()


def _rerun(lines: list[dict[str, Any]], run: str, factor: float) -> list[dict[str, Any]]:
    """The same run under another run id, every batch factor x as long."""
    copied = json.loads(json.dumps(lines))
    for line in copied:
        line["run_id"] = run
        if line["type"] == "progress":
            line["progress"]["runId"] = run
            line["progress"]["batchDuration"] = int(line["progress"]["batchDuration"] * factor)
    return copied


def test_rounds_of_a_setup_compare_by_their_median(tmp_path: Path) -> None:
    hdfs, rocksdb = _lines("hdfs.jsonl"), _lines("rocksdb_changelog.jsonl")
    runs = [_rerun(hdfs, f"h{i}", f) for i, f in enumerate((1.0, 0.5, 3.0))]
    runs += [_rerun(rocksdb, f"r{i}", f) for i, f in enumerate((2.0, 4.0, 1.0))]
    advice = advise_checkpoint_log(_write(tmp_path / "rounds.jsonl", *runs), overrides=ConfOverrides(cores=2))
    (comparison,) = advice.store_comparisons
    assert comparison.hdfs.runs == ("h0", "h1", "h2") and comparison.rocksdb.runs == ("r0", "r1", "r2")
    assert comparison.hdfs.median_batch_ms == _median_batch(_rerun(hdfs, "x", 1.0))
    assert comparison.rocksdb.median_batch_ms == _median_batch(_rerun(rocksdb, "x", 2.0))
    assert comparison.rocksdb.fastest_run_ms == _median_batch(_rerun(rocksdb, "x", 1.0))
    assert comparison.ratio == comparison.rocksdb.median_batch_ms / comparison.hdfs.median_batch_ms
