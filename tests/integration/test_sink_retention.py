"""Issue 15.1: with `[sink] retention`, Spark drops aged entries from the compacted sink log; a restart
must never take that committed output for a failed batch's and move it aside."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tests.integration.test_recovery import _expected, _landing, _release
from tidemark.config import load_config
from tidemark.pipeline.run import run_pipeline
from tidemark.recovery.failover import Failover
from tidemark.sinks.parquet import read_ledger, read_sink_log
from tidemark.storage.local import LocalFS

pytestmark = pytest.mark.integration


def test_expired_log_entries_are_never_moved_on_restart(spark: Any, tmp_path: Path) -> None:
    files = _landing(tmp_path, files=6, seed=15)
    sink = tmp_path / "output"
    config = load_config(
        write_config(
            tmp_path,
            sink={"retention": "1s"},
            # Compact every 2 batches, so entries expire while the test runs.
            spark={"conf": {'"spark.sql.streaming.fileSink.log.compactInterval"': 2}},
        )
    )
    released = 0
    for step in (2, 2, 2):
        _release(files[released : released + step], tmp_path / "landing")
        released += step
        before = {p: p.stat().st_mtime_ns for p in sink.rglob("*.parquet")}
        run_pipeline(config, spark=spark, prestarts=[Failover()])
        # Nothing a committed batch wrote moved, and nothing was archived.
        assert all(p.exists() and p.stat().st_mtime_ns == m for p, m in before.items())
        assert not (tmp_path / ".tidemark-archive").exists()
        time.sleep(1.2)  # older than the retention by the next compaction
    store = LocalFS(str(sink))
    on_disk = {e.rel for e in store.list_files() if e.rel.endswith(".parquet") and "/_" not in f"/{e.rel}"}
    listed = set(read_sink_log(store).files)
    assert on_disk - listed, "retention expired no entry: the test would not exercise the sweep"
    ledger = read_ledger(LocalFS(str(tmp_path / "checkpoint")))
    assert {rel for entry in ledger.values() for rel, _ in entry.files} == on_disk
    _assert_matches_oracle_raw(sink, files)


def _assert_matches_oracle_raw(sink: Path, files: list[Path]) -> None:
    from tests.helpers import read_sink

    actual = read_sink(sink)  # a plain Parquet reader: every file on disk counts
    expected = _expected(files)
    key = ["user", "windowStart", "windowEnd"]
    assert not actual.duplicated(key).any()
    merged = actual.merge(expected, on=key, how="outer", indicator=True)
    assert (merged["_merge"] == "both").all()
    assert (merged["count_x"] == merged["count_y"]).all()
