"""What `checkpoint inspect` says about a damaged newest state file, checked against Spark itself.

A window aggregation writes a checkpoint (HDFS-backed and RocksDB); the newest state file of one partition is
emptied. inspect says the query cannot restart and names a batch to roll back to. Spark then really fails to
restart it, and after the rollback the fix describes, done by hand on the files (no tidemark code), Spark
restarts and the sink holds exactly the windows an independent pandas computation over all the input gives.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest

from tests.integration.test_checkpoint_spark import _expected
from tests.streaming_queries import HDFS, ROCKSDB, run_query, windowed, write_input
from tidemark.doctor.inspect import inspect_checkpoint
from tidemark.findings import Severity

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _version(name: str) -> int | None:
    stem = name.lstrip(".").split(".")[0].split("_")[0]
    return int(stem) if stem.isdigit() else None


def _roll_back_by_hand(checkpoint: Path, sink: Path, batch: int) -> None:
    """The fix's words: offsets/ and commits/ entries after N, state files of versions after N+1 (with their .crc
    files), and the sink's _spark_metadata entries after N."""
    for folder in (checkpoint / "offsets", checkpoint / "commits", sink / "_spark_metadata"):
        for path in list(folder.iterdir()):
            number = _version(path.name)
            if number is not None and number > batch:
                path.unlink()
    for path in list((checkpoint / "state").rglob("*")):
        if path.is_file() and path.parent.name not in ("SSTs", "_metadata"):
            number = _version(path.name)
            if number is not None and number > batch + 1:
                path.unlink()


@pytest.mark.parametrize(
    ("conf", "suffix"),
    [((HDFS, "false", "1", "true"), "delta"), ((ROCKSDB, "false", "1", "true"), "zip")],
    ids=["hdfs", "rocksdb"],
)
def test_a_damaged_newest_state_file_stops_spark_and_the_fix_restarts_it(
    spark: SparkSession, tmp_path: Path, conf: tuple[str, str, str, str], suffix: str
) -> None:
    from pyspark.errors import StreamingQueryException

    source = tmp_path / "in"
    write_input(source, range(3))
    checkpoint, sink = tmp_path / "ck", tmp_path / "out"
    run_query(spark, source, windowed, checkpoint, sink, conf)

    report = inspect_checkpoint(str(checkpoint))
    assert report.findings == []
    newest = (report.latest_committed_batch or 0) + 1
    (checkpoint / "state" / "0" / "0" / f"{newest}.{suffix}").write_bytes(b"")

    report = inspect_checkpoint(str(checkpoint))
    [finding] = [f for f in report.findings if f.severity is Severity.ERROR]
    assert finding.code == "CORRUPT_STATE_FILE" and "cannot restart" in (finding.impact or "")
    match = re.search(r"--to-batch (\d+) ", finding.fix)
    assert match is not None, finding.fix
    target = int(match.group(1))
    assert target < newest - 1 + 1

    # Spark agrees: the restart fails on that file.
    write_input(source, range(3, 5))
    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken / "ck")
    shutil.copytree(sink, broken / "out")
    with pytest.raises(StreamingQueryException):
        run_query(spark, source, windowed, broken / "ck", broken / "out", conf)

    _roll_back_by_hand(checkpoint, sink, target)
    assert [f.code for f in inspect_checkpoint(str(checkpoint)).findings] == []
    run_query(spark, source, windowed, checkpoint, sink, conf)
    got = spark.read.parquet(str(sink)).toPandas()  # through the sink's log, as its readers see it
    got["start"] = pd.to_datetime(got["start"], utc=True)
    got = got.sort_values(["start", "k"]).reset_index(drop=True)
    expected = _expected(source)
    assert got["k"].tolist() == expected["k"].tolist()
    assert got["s"].astype("int64").tolist() == expected["s"].astype("int64").tolist()
    assert (got["start"] == expected["start"]).all()
