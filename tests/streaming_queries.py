"""Small streaming queries whose checkpoints the checkpoint tests inspect and prune.

Only the standard library, pyspark and tidemark.session (which imports nothing else at load):
`tests/fixtures/spark35/record.py` runs these same queries under pyspark 3.5, with `PYTHONPATH=src`, to record
the Spark 3.5 checkpoints kept in `tests/fixtures/spark35/`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.session import runtime_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
CONF_KEYS = (
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
    "spark.sql.streaming.stateStore.checkpointFormatVersion",
    "spark.sql.streaming.noDataMicroBatches.enabled",
)
SCHEMA = "k STRING, ts TIMESTAMP, v INT"


def write_input(folder: Path, minutes: range) -> None:
    """One small JSON file per minute: 6 events over 3 keys."""
    folder.mkdir(parents=True, exist_ok=True)
    for minute in minutes:
        rows = [
            {"k": f"k{j % 3}", "ts": f"2024-01-01T00:{minute:02d}:{j * 10:02d}Z", "v": minute * 10 + j}
            for j in range(6)
        ]
        (folder / f"m{minute:03d}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def run_query(
    spark: SparkSession,
    source: Path,
    build: Callable[[DataFrame], DataFrame],
    checkpoint: Path,
    output: Path,
    conf: tuple[str, str, str, str],
) -> None:
    """Run until the input is drained, one file per batch, with the given state store settings."""
    with runtime_conf(spark, dict(zip(CONF_KEYS, conf, strict=True))):
        frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
        query = (
            build(frame)
            .writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .outputMode("append")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()


def _window_sums(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    grouped = frame.groupBy(F.window("ts", "1 minute"), "k").agg(F.sum("v").alias("s"))
    return grouped.select(F.col("window.start").alias("start"), "k", "s")


def windowed(frame: DataFrame) -> DataFrame:
    return _window_sums(frame.withWatermark("ts", "1 minute"))


def dedup_then_window(frame: DataFrame) -> DataFrame:
    return _window_sums(frame.withWatermark("ts", "1 minute").dropDuplicates(["k", "ts"]))


def sessions(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    grouped = frame.withWatermark("ts", "1 minute").groupBy(F.session_window("ts", "30 seconds"), "k").count()
    return grouped.select(F.col("session_window.start").alias("start"), "k", "count")


def join(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    left = frame.withWatermark("ts", "1 minute").select(F.col("k").alias("lk"), F.col("ts").alias("lt"), "v")
    right = frame.withWatermark("ts", "1 minute").select(F.col("k").alias("rk"), F.col("ts").alias("rt"))
    return left.join(right, F.expr("lk = rk AND rt BETWEEN lt AND lt + interval 10 seconds"))


def assert_join_output_matches_pandas(source: Path, output: Path, pairs_expected: int) -> None:
    """The `join` query's output equals the same inner join computed by pandas over every input file (`m*.json`);
    no event is late (one file per batch, in order), so the stream emits every match once."""
    import pandas as pd

    events = pd.concat(pd.read_json(f, lines=True) for f in sorted(source.glob("m*.json")))
    events["ts"] = pd.to_datetime(events["ts"], utc=True)
    left = events.rename(columns={"k": "lk", "ts": "lt"})
    right = events[["k", "ts"]].rename(columns={"k": "rk", "ts": "rt"})
    pairs = left.merge(right, left_on="lk", right_on="rk")
    pairs = pairs[(pairs["rt"] >= pairs["lt"]) & (pairs["rt"] <= pairs["lt"] + pd.Timedelta(seconds=10))]
    actual = pd.read_parquet(output)
    for column in ("lt", "rt"):
        actual[column] = pd.to_datetime(actual[column], utc=True)
    columns = ["lk", "lt", "v", "rk", "rt"]
    assert len(pairs) == pairs_expected
    got = actual[columns].sort_values(columns).reset_index(drop=True)
    assert got.equals(pairs[columns].sort_values(columns).reset_index(drop=True).astype(got.dtypes.to_dict()))


# Fixture checkpoints skip no-data batches: half the batches, same layout.
CASES: dict[str, tuple[Callable[[DataFrame], DataFrame], tuple[str, str, str, str]]] = {
    "hdfs_dedup_window": (dedup_then_window, (HDFS, "false", "1", "false")),
    "rocksdb_changelog_join": (join, (ROCKSDB, "true", "1", "false")),
    "rocksdb_sessions": (sessions, (ROCKSDB, "false", "1", "false")),
    "rocksdb_v2_window": (windowed, (ROCKSDB, "true", "2", "false")),
}
