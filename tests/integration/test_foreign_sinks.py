"""Commands that change data refuse a sink tidemark did not write, before touching anything.

Plain PySpark jobs (no tidemark) write a window count in three layouts: unpartitioned, partitioned by the key,
and partitioned by windowStart with other columns. A TOML describes each job as a user would; recover (dry run
and --apply), recover --to-batch, run and audit must refuse in one line and leave every file as it was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.cli.main import main
from tidemark.pipeline.generate import generate_events

pytestmark = pytest.mark.integration

SCHEMA = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"


def listing(root: Path) -> dict[str, tuple[int, str]]:
    """Every file below root with its size and sha256."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _windows(frame: Any) -> Any:
    from pyspark.sql import functions as F

    events = frame.withColumn("ts", F.to_timestamp("ts")).withWatermark("ts", "10 minutes")
    grouped = events.groupBy("user", F.window("ts", "15 minutes").alias("w")).agg(
        F.min("ts").alias("firstEventTime"),
        F.max("ts").alias("lastEventTime"),
        F.count(F.lit(1)).alias("count"),
        F.sum("value").alias("value_sum"),
    )
    return grouped.select(
        "user",
        F.col("w.start").alias("windowStart"),
        F.col("w.end").alias("windowEnd"),
        "firstEventTime",
        "lastEventTime",
        "count",
        "value_sum",
    )


def _other_columns(frame: Any) -> Any:
    from pyspark.sql import functions as F

    windows = _windows(frame)
    return windows.select("user", "windowStart", "windowEnd", F.col("count").alias("n"))


LAYOUTS: dict[str, tuple[Callable[[Any], Any], list[str], str]] = {
    "unpartitioned": (_windows, [], "are not in windowStart=... folders"),
    "partitioned_by_user": (_windows, ["user"], "partitioned as user=..."),
    "other_columns": (_other_columns, ["windowStart"], "missing firstEventTime, lastEventTime, count, value_sum"),
}


@pytest.fixture(scope="module")
def jobs(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One plain PySpark job per layout, run to the end of its landing files; the folder holds its TOML."""
    roots = {}
    for name, (build, partitions, _) in LAYOUTS.items():
        root = tmp_path_factory.mktemp(name)
        generate_events(root / "landing", events=300, keys=3, files=2, seed=7)
        stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(root / "landing"))
        writer = build(stream).writeStream.format("parquet").option("path", str(root / "output"))
        if partitions:
            writer = writer.partitionBy(*partitions)
        query = writer.option("checkpointLocation", str(root / "checkpoint")).trigger(availableNow=True).start()
        query.awaitTermination()
        write_config(root)  # the user's description of the job: window 15 minutes by user, sum of value
        roots[name] = root
    return roots


COMMANDS = [
    ["recover", "{config}"],
    ["recover", "{config}", "--apply"],
    ["recover", "{config}", "--to-batch", "0", "--apply"],
    ["run", "{config}", "--available-now"],
    ["audit", "{config}"],
]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_data_changing_commands_refuse_a_foreign_sink_and_touch_nothing(
    layout: str, jobs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = jobs[layout]
    expected = LAYOUTS[layout][2]
    before = listing(root)
    assert any(name.startswith("output/") and name.endswith(".parquet") for name in before)
    for command in COMMANDS:
        code = main([arg.replace("{config}", str(root / "tidemark.toml")) for arg in command])
        captured = capsys.readouterr()
        assert code == 1, (command, captured.err)
        lines = [line for line in captured.err.splitlines() if line.strip() and not line.startswith("tidemark running")]
        lines = [line for line in lines if not line.startswith("recovering ")]
        assert len(lines) == 1, (command, captured.err)
        assert "was not written by this config" in lines[0], lines[0]
        assert expected in lines[0], lines[0]
        assert "Nothing was changed" in lines[0]
        assert "Schema" not in captured.out and "FieldRef" not in captured.err
        assert listing(root) == before, command
