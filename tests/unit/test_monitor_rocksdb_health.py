"""The crawl watch and RocksDB's figures in analyze and the report, on the batches a real tiny cap produced.

The figures are Spark's, measured on this machine (pyspark 4.1.1, local[2], 2 partitions): 100 k new keys a batch,
every key updated every batch, tidemark's RocksDB settings with a 16 MB cap and with 512 MB.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tidemark.formats import BatchProgress
from tidemark.monitor.analyze import analyze
from tidemark.monitor.report import render_report
from tidemark.monitor.rocksdb_health import CRAWL_CODE, CrawlWatch, RocksDBBatch, suggested_cap_bytes

MIB = 1024**2
# (updates, gets, get ms, misses, hits, memory MB, SST MB) per batch, batches 0-5.
TINY_CAP = [
    (100_000, 100_000, 418, 4, 0, 7.8, 1.0),
    (200_000, 200_000, 1368, 11677, 46171, 8.0, 2.8),
    (300_000, 300_000, 4348, 25778, 435374, 7.6, 7.1),
    (400_000, 400_000, 11708, 87628, 308387, 11.0, 8.5),
    (500_000, 500_000, 13697, 190889, 449229, 11.6, 8.5),
    (600_000, 600_000, 15035, 260911, 861821, 10.4, 14.5),
]
AMPLE_CAP = [
    (100_000, 100_000, 160, 0, 0, 15.3, 0.0),
    (200_000, 200_000, 663, 0, 0, 39.8, 0.0),
    (300_000, 300_000, 1678, 0, 0, 81.3, 0.0),
    (400_000, 400_000, 1823, 0, 0, 141.3, 0.0),
    (500_000, 500_000, 2095, 2, 0, 114.5, 3.8),
    (600_000, 600_000, 5320, 4717, 372536, 121.9, 7.5),
]


def _progress(batch: int, row: tuple[float, ...], name: str = "growing") -> dict[str, Any]:
    updates, gets, get_ms, misses, hits, memory, sst = row
    return {
        "id": "q",
        "runId": "r",
        "name": name,
        "batchId": batch,
        "timestamp": f"2026-01-01T00:00:{batch:02d}.000Z",
        "batchDuration": 10_000,
        "numInputRows": updates,
        "stateOperators": [
            {
                "operatorName": "stateStoreSave",
                "numRowsTotal": 0,
                "numRowsUpdated": updates,
                "memoryUsedBytes": int(memory * MIB),
                "numShufflePartitions": 2,
                "numStateStoreInstances": 2,
                "customMetrics": {
                    "rocksdbGetCount": gets,
                    "rocksdbGetLatency": get_ms,
                    "rocksdbReadBlockCacheMissCount": misses,
                    "rocksdbReadBlockCacheHitCount": hits,
                    "rocksdbSstFileSize": int(sst * MIB),
                },
            }
        ],
    }


def _watch(rows: list[tuple[float, ...]], cap: int) -> tuple[CrawlWatch, list[int]]:
    watch = CrawlWatch(active_partitions=2, room_bytes=1024 * MIB)
    fired = []
    for batch, row in enumerate(rows):
        if watch.observe(BatchProgress.from_json(_progress(batch, row)), cap) is not None:
            fired.append(batch)
    return watch, fired


def test_a_tiny_cap_is_seen_crawling_batches_before_the_end() -> None:
    watch, fired = _watch(TINY_CAP, 16 * MIB)
    assert fired == [3]  # once, as soon as three batches show the miss share climbing (0.06, 0.09, 0.22)
    warning = watch.warning
    assert warning is not None and warning.code == CRAWL_CODE
    assert "rose from 0.06 to 0.22 over batches 1-3" in warning.message
    assert "of its 16 MB cap" in warning.message
    # 8.5 MB of SST files x 100/17 (more than 400 k keys updated x 100 B), with the growth headroom.
    assert warning.suggested_cap_mb == pytest.approx(8.5 * 100 / 17 * 1.5, abs=1)
    assert f"bounded_memory_mb = {warning.suggested_cap_mb}" in warning.fix
    assert "restart" in warning.fix


def test_an_ample_cap_is_not_warned_about() -> None:
    watch, fired = _watch(AMPLE_CAP, 512 * MIB)
    assert fired == []
    assert watch.last is not None and watch.last.miss_share < 0.02


def test_a_high_miss_share_warns_without_a_trend_and_a_cap_beyond_the_room_says_what_to_change() -> None:
    watch = CrawlWatch(active_partitions=1, room_bytes=64 * MIB)
    high = (1_000_000, 1_000_000, 90_000, 600_000, 400_000, 250.0, 400.0)
    assert watch.observe(BatchProgress.from_json(_progress(0, high)), 256 * MIB) is None  # the loading batch
    warning = watch.observe(BatchProgress.from_json(_progress(1, high)), 256 * MIB)
    assert warning is not None and "is 0.60 at batch 1" in warning.message
    assert "memoryOverhead" in warning.fix and "state repartition" in warning.fix and "hdfs" in warning.fix


def test_the_suggested_cap_counts_only_the_partitions_worked_at_once() -> None:
    batch = RocksDBBatch.from_progress(BatchProgress.from_json(_progress(1, TINY_CAP[5])), 16 * MIB)
    assert batch is not None and batch.instances == 2
    assert suggested_cap_bytes(batch, 1) == pytest.approx(suggested_cap_bytes(batch, None) / 2)
    assert batch.cap_share == pytest.approx(10.4 / 16)


def _log(path: Path, rows: list[tuple[float, ...]], cap: int | None) -> Path:
    lines = [{"type": "started", "time": "2026-01-01T00:00:00.000Z", "run_id": "run-1", "name": "growing"}]
    for batch, row in enumerate(rows):
        line: dict[str, Any] = {
            "type": "progress",
            "time": f"2026-01-01T00:00:{batch + 1:02d}.000Z",
            "run_id": "run-1",
            "progress": _progress(batch, row),
        }
        if cap is not None:
            line["rocksdb_cap_bytes"] = cap
        lines.append(line)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_analyze_finds_the_crawl_and_reports_memory_against_the_cap(tmp_path: Path) -> None:
    result = analyze(_log(tmp_path / "run-1.jsonl", TINY_CAP, 16 * MIB))
    [run] = result.runs
    # The log's RocksDB counts no rows (tidemark's default for windows): analyze says so as well (info).
    assert [f.code for f in run.findings] == ["STATE_ROWS_NOT_TRACKED", CRAWL_CODE]
    assert run.rocksdb is not None
    assert run.rocksdb.cap_bytes == 16 * MIB
    assert run.rocksdb.max_memory_bytes == int(11.6 * MIB)
    assert run.rocksdb.last_cache_miss_share == pytest.approx(260911 / 600_000, abs=1e-4)
    ample = analyze(_log(tmp_path / "ample.jsonl", AMPLE_CAP, None))
    assert [f.code for f in ample.runs[0].findings] == ["STATE_ROWS_NOT_TRACKED"]
    assert ample.runs[0].rocksdb is not None
    assert ample.runs[0].rocksdb.cap_bytes is None


def test_the_report_draws_rocksdb_memory_against_its_cap(tmp_path: Path) -> None:
    page = render_report(_log(tmp_path / "run-1.jsonl", TINY_CAP, 16 * MIB))
    assert "RocksDB memory against its cap" in page and "RocksDB block cache misses" in page
    assert CRAWL_CODE in page
    assert "16.0 MiB cap" in page
