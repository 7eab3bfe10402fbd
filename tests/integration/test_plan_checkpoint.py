"""`plan memory --from-checkpoint` on a real checkpoint: rows and UnsafeRow sizes against pandas and the schema."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest

from tidemark.cli.main import main
from tidemark.config.model import StateStoreKind
from tidemark.session import runtime_conf
from tidemark.sizing.measured import measured_from_checkpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
SCHEMA = "k STRING, ts TIMESTAMP, v INT"
# Batch i brings 5 * (i + 1) new keys of growing length and rewrites key 0.
FILES = 4


def _rows(batch: int) -> list[dict[str, object]]:
    first = sum(5 * (b + 1) for b in range(batch))
    keys = [f"user-{'x' * (n % 11)}{n}" for n in range(first, first + 5 * (batch + 1))]
    stamp = f"2024-01-01T00:{batch:02d}:00Z"
    return [{"k": k, "ts": stamp, "v": i} for i, k in enumerate([*keys, "user-0"])]


def _padded(n: int) -> int:
    return 8 * math.ceil(n / 8)


@pytest.fixture(scope="module")
def checkpoint(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    from pyspark.sql import functions as F

    root = tmp_path_factory.mktemp("plan_checkpoint")
    source = root / "in"
    source.mkdir()
    frames = []
    for batch in range(FILES):
        rows = _rows(batch)
        written = source / f"b{batch}.json"
        written.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        # Spark takes files in modification-time order: distinct times make batch i read file i.
        os.utime(written, (1_700_000_000 + batch, 1_700_000_000 + batch))
        frames.append(pd.DataFrame(rows).assign(batch=batch))
    ckpt = root / "ckpt"
    with runtime_conf(spark, {"spark.sql.streaming.stateStore.providerClass": HDFS}):
        events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
        counts = events.groupBy("k").agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("s"), F.max("ts").alias("t"))
        query = (
            counts.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    return ckpt, pd.concat(frames)


def test_rows_and_sizes_match_pandas_and_the_schema(spark: SparkSession, checkpoint: tuple[Path, pd.DataFrame]) -> None:
    path, events = checkpoint
    measured = measured_from_checkpoint(path, lookback=2)
    assert measured.state_store is StateStoreKind.HDFS
    latest = FILES - 1
    assert [p.batch_id for p in measured.points] == [latest - 2, latest]
    expected_rows = [events[events.batch <= b].k.nunique() for b in (latest - 2, latest)]
    assert [p.rows for p in measured.points] == expected_rows
    assert all(p.timestamp is not None for p in measured.points)
    # key: null bits + one 8-byte slot + the UTF-8 text padded to 8 bytes
    keys = events.k.drop_duplicates()
    expected_key = (keys.map(lambda k: 16 + _padded(len(k.encode()))).sum()) / len(keys)
    value_fields = len(spark.read.format("statestore").load(str(path)).schema["value"].dataType.fields)
    assert measured.shape is not None
    assert measured.shape.key_bytes == pytest.approx(expected_key)
    assert measured.shape.value_bytes == 8 + 8 * value_fields
    assert measured.state_instances == 2  # spark.sql.shuffle.partitions of the test session


def test_cli_forecasts_from_the_checkpoint(
    checkpoint: tuple[Path, pd.DataFrame], capsys: pytest.CaptureFixture[str]
) -> None:
    path, events = checkpoint
    assert main(["plan", "memory", "--from-checkpoint", str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["forecast"]
    rows_then = events[events.batch <= 0].k.nunique()
    rows_now = events.k.nunique()
    assert result["growth"]["keys_per_batch"] == pytest.approx((rows_now - rows_then) / (FILES - 1))
    assert result["break_point"]["limit"] == "heap"
    assert result["shape_from"] == "checkpoint (state reader)"
