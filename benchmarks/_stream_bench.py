"""Helpers shared by the benchmarks: a local session, the three state store setups, progress collection."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
RETAIN = "spark.sql.streaming.minBatchesToRetain"

# name -> the runtime SQL confs of that setup (read at query start)
SETUPS: dict[str, dict[str, str]] = {
    "hdfs": {PROVIDER: HDFS},
    "rocksdb": {PROVIDER: ROCKSDB, CHANGELOG: "false"},
    "rocksdb+changelog": {PROVIDER: ROCKSDB, CHANGELOG: "true"},
}


def session(shuffle_partitions: int = 2, driver_memory: str = "3g") -> Any:
    """A local[2] session for a benchmark run (the script is its own process)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tidemark-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def apply_conf(spark: Any, conf: Mapping[str, str]) -> dict[str, str | None]:
    """Set runtime confs; return the previous values so they can be restored."""
    previous: dict[str, str | None] = {}
    for key, value in conf.items():
        previous[key] = spark.conf.get(key, None)
        spark.conf.set(key, value)
    return previous


def restore_conf(spark: Any, previous: Mapping[str, str | None]) -> None:
    """Undo apply_conf."""
    for key, value in previous.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def run_batches(query: Any, batches: int, timeout: float) -> list[dict[str, Any]]:
    """Wait until the query has completed `batches` batches (ids 0..batches-1); return their progress."""
    deadline = time.monotonic() + timeout
    seen: dict[int, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        for progress in query.recentProgress:
            seen[int(progress.batchId)] = json.loads(progress.json)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        if len([b for b in seen if b < batches]) >= batches:
            break
        time.sleep(0.05)
    query.stop()
    for progress in query.recentProgress:
        seen[int(progress.batchId)] = json.loads(progress.json)
    missing = [b for b in range(batches) if b not in seen]
    if missing:
        msg = f"batches {missing[:5]}... did not complete within {timeout:.0f}s"
        raise RuntimeError(msg)
    return [seen[b] for b in range(batches)]


def folder_stats(path: Path) -> tuple[int, int]:
    """(file count, total bytes) under path."""
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


@dataclass(frozen=True)
class Summary:
    """Median and max of a series."""

    median: float
    maximum: float

    @classmethod
    def of(cls, values: list[float]) -> Summary:
        """Summarise values (0 when empty)."""
        if not values:
            return cls(0.0, 0.0)
        return cls(statistics.median(values), max(values))


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
