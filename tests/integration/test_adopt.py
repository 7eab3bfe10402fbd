"""The cut-over of a plain-Spark job to tidemark (docs/adopt.md): nothing lost, nothing twice, against the oracle.

A plain PySpark job (window count per user, watermark, unpartitioned Parquet sink) reads the first landing files
and stops. One more file lands during the switch; `tidemark adopt --apply` replays the windows that were still
open into a new checkpoint and sink; two more files land and `tidemark run` continues. The old sink, untouched,
plus the new one must equal a pandas computation of one continuous job over every file. First, what adopt
cannot do is refused in one line with every file left as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.helpers import read_sink, write_config
from tests.oracles import assert_matches_oracle, window_oracle
from tidemark.cli.main import main
from tidemark.pipeline.generate import generate_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SCHEMA = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"


def listing(root: Path) -> dict[str, tuple[int, str]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _land(files: list[Path], landing: Path) -> None:
    """Files arrive one by one, in order (the file source reads them by modification time)."""
    for file in files:
        target = landing / file.name
        shutil.copy(file, target)
        stamp = 1_700_000_000 + int(file.stem.split("-")[1])
        os.utime(target, (stamp, stamp))


def window_counts(events: Any) -> Any:
    """The old job's query as a user wrote it by hand: grouped by window then user, the window's bounds as columns."""
    from pyspark.sql import functions as F

    counts = events.groupBy(F.window("ts", "15 minutes"), "user").agg(
        F.min("ts").alias("firstEventTime"),
        F.max("ts").alias("lastEventTime"),
        F.count(F.lit(1)).alias("count"),
        F.sum("value").alias("value_sum"),
    )
    return counts.select(
        "user",
        F.col("window.start").alias("windowStart"),
        F.col("window.end").alias("windowEnd"),
        "firstEventTime",
        "lastEventTime",
        "count",
        "value_sum",
    )


def _old_job(spark: Any, landing: Path, checkpoint: Path, sink: Path) -> None:
    """What a user wrote by hand: grouped by window first, the window's bounds as columns, no partitions."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(landing))
        .withColumn("ts", F.to_timestamp("ts"))
        .withWatermark("ts", "10 minutes")
    )
    out = window_counts(events)
    query = (
        out.writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def _read_old_sink(path: Path) -> pd.DataFrame:
    frame = pd.read_parquet(path)
    for column in ("windowStart", "windowEnd", "firstEventTime", "lastEventTime"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


def test_a_plain_spark_job_moves_to_tidemark_with_nothing_lost_and_nothing_twice(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generate_events(tmp_path / "events", events=1000, keys=4, files=5, seed=21)
    files = sorted((tmp_path / "events").glob("events-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    landing = tmp_path / "landing"
    landing.mkdir()
    _land(files[:2], landing)
    _old_job(spark, landing, tmp_path / "old-checkpoint", tmp_path / "old-output")
    old_sink_before = listing(tmp_path / "old-output")
    old_checkpoint_before = listing(tmp_path / "old-checkpoint")
    _land(files[2:3], landing)  # arrived while the job was being switched
    _refusals_touch_nothing(tmp_path, landing, files[0], capsys)
    config = write_config(tmp_path)  # the job as a tidemark TOML: new checkpoint/ and output/ folders
    args = ["adopt", str(config), "--from-checkpoint", str(tmp_path / "old-checkpoint")]
    args += ["--old-sink", str(tmp_path / "old-output")]

    assert main([*args, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["position"]["processed"] == 2 and plan["position"]["new_files"] == 1
    old_rows = _read_old_sink(tmp_path / "old-output")
    assert plan["old_sink"]["rows"] == len(old_rows) > 0
    resume = pd.Timestamp(plan["resume_from"])
    assert old_rows["windowStart"].max() < resume  # every window the old job emitted starts before the replay
    assert not (tmp_path / "checkpoint").exists() and not (tmp_path / "output").exists()  # a dry run

    assert main([*args, "--apply"]) == 0
    capsys.readouterr()
    _land(files[3:], landing)
    assert main(["run", str(config), "--available-now"]) == 0
    capsys.readouterr()

    assert listing(tmp_path / "old-output") == old_sink_before  # kept as is
    assert listing(tmp_path / "old-checkpoint") == old_checkpoint_before
    new_rows = read_sink(tmp_path / "output")
    assert new_rows["windowStart"].min() >= resume
    both = pd.concat([old_rows[new_rows.columns], new_rows], ignore_index=True)
    both = both.sort_values(["user", "windowStart"]).reset_index(drop=True)
    expected = window_oracle([[f] for f in files], window=timedelta(minutes=15), watermark=timedelta(minutes=10))
    assert_matches_oracle(both, expected)


def _refusals_touch_nothing(root: Path, landing: Path, first: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What adopt cannot do is refused in one line, before anything is written."""
    old = ["--from-checkpoint", str(root / "old-checkpoint"), "--old-sink", str(root / "old-output")]
    cases: dict[str, tuple[dict[str, dict[str, Any]], str]] = {
        "another window": ({"aggregation": {"window": "10 minutes"}}, "WINDOW"),
        # A longer window moves the replay point back before the old sink's newest window: the window is named, not
        # the old sink (issue 37).
        "a longer window": ({"aggregation": {"window": "1 hour"}}, "WINDOW"),
        "the old sink": ({"sink": {"path": "old-output"}}, "is the old job's sink"),
        "the old checkpoint": ({"checkpoint": {"location": "old-checkpoint"}}, "old job's checkpoint"),
    }
    before = {k: v for k, v in listing(root).items() if k != "tidemark.toml"}
    for name, (overrides, expected) in cases.items():
        config = write_config(root, **overrides)
        assert main(["adopt", str(config), *old, "--apply"]) == 1, name
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not ln.startswith("adopting")]
        assert len(lines) == 1 and expected in lines[0] and "Nothing was changed" in lines[0], (name, lines)
        assert {k: v for k, v in listing(root).items() if k != "tidemark.toml"} == before, name
    config = write_config(root)
    aside = root / first.name
    (landing / first.name).rename(aside)
    assert main(["adopt", str(config), *old]) == 1
    assert "are gone" in capsys.readouterr().err
    aside.rename(landing / first.name)
