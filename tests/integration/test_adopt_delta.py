"""The cut-over of a plain-Spark job that writes Delta Lake (Spark's own `format("delta")` sink) to tidemark, in place:
tidemark writes into the old job's own table (its commits carry tidemark's transaction, the old job's carry its
query id), from the first window that was still open. The table, read with delta-rs, equals a pandas computation
of one continuous job over every file: nothing lost, nothing twice.

The old job runs in its own process, in a session with Delta's jars (the tests' shared session has none), started
through tidemark's own session route for a Delta config; the query itself is plain PySpark.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest
from deltalake import DeltaTable

from tests.helpers import write_config
from tests.integration.test_adopt import SCHEMA, _land, listing
from tests.oracles import assert_matches_oracle, window_oracle
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.pipeline.generate import generate_events
from tidemark.recovery.audit import audit_sink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_OLD_JOB = """
import sys
from pyspark.sql import functions as F
from tests.integration.test_adopt import window_counts
from tidemark.config import load_config
from tidemark.pipeline.start import launched

config, landing, checkpoint, table = sys.argv[1:5]
with launched(load_config(config)) as launch:
    spark = launch.session()
    events = (
        spark.readStream.schema({schema!r})
        .option("maxFilesPerTrigger", 1)
        .json(landing)
        .withColumn("ts", F.to_timestamp("ts"))
        .withWatermark("ts", "10 minutes")
    )
    query = (
        window_counts(events).writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(table)
    )
    query.awaitTermination()
    print("query id", query.id)
"""


def _cli(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    command = [sys.executable, "-m", "tidemark.cli.main", *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


def _table(path: Path) -> pd.DataFrame:
    frame = DeltaTable(str(path)).to_pandas()
    for column in ("windowStart", "windowEnd", "firstEventTime", "lastEventTime"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


def test_a_plain_spark_delta_job_moves_to_tidemark_in_its_own_table(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generate_events(tmp_path / "events", events=1000, keys=4, files=5, seed=21)
    files = sorted((tmp_path / "events").glob("events-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    landing = tmp_path / "landing"
    landing.mkdir()
    _land(files[:2], landing)
    config = write_config(tmp_path, sink={"format": "delta", "path": "table"})
    table = tmp_path / "table"
    paths = [str(config), str(landing), str(tmp_path / "old-checkpoint"), str(table)]
    old = subprocess.run(
        [sys.executable, "-c", _OLD_JOB.format(schema=SCHEMA), *paths],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert old.returncode == 0, old.stderr[-3000:]
    query_id = old.stdout.split("query id")[-1].strip()
    old_rows = _table(table)
    old_version = DeltaTable(str(table)).version()
    assert len(old_rows) > 0 and DeltaTable(str(table)).transaction_version(query_id) is not None
    old_checkpoint_before = listing(tmp_path / "old-checkpoint")
    _land(files[2:3], landing)  # arrived while the job was being switched

    args = ["adopt", str(config), "--from-checkpoint", str(tmp_path / "old-checkpoint"), "--old-sink", str(table)]
    # The dry run in this process, on the tests' shared session (it plans from the old checkpoint's offsets and the
    # table's rows, read with delta-rs; it writes nothing and needs no Delta jars); the apply below is a command of
    # its own, as users run it.
    capsys.readouterr()
    assert main([*args, "--json"]) == 0, capsys.readouterr().err[-2000:]
    plan = json.loads(capsys.readouterr().out)["plan"]
    resume = pd.Timestamp(plan["resume_from"])
    assert plan["old_sink"]["rows"] == len(old_rows)
    assert old_rows["windowStart"].max() < resume  # every window the old job emitted starts before the replay
    assert DeltaTable(str(table)).version() == old_version and not (tmp_path / "checkpoint").exists()  # dry run

    applied = _cli([*args, "--apply"])
    assert applied.returncode == 0, applied.stderr[-2000:]
    _land(files[3:4], landing)
    done = _cli(["run", str(config), "--available-now"])
    assert done.returncode == 0, done.stderr[-2000:]

    assert listing(tmp_path / "old-checkpoint") == old_checkpoint_before
    rows = _table(table)
    expected = window_oracle([[f] for f in files[:4]], window=timedelta(minutes=15), watermark=timedelta(minutes=10))
    assert_matches_oracle(rows, expected)
    # The old job's commits are its own; tidemark's start at the replay point, with its own transaction.
    snapshot = DeltaTable(str(table))
    assert snapshot.transaction_version(query_id) is not None
    assert snapshot.transaction_version(f"tidemark:{load_config(config).pipeline.name}") is not None
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
    assert any("other writers" in n for n in audit.notes), audit.notes
    assert sum(r.rows or 0 for r in audit.batches) == len(rows) - len(old_rows)

    again = _cli([*args, "--apply"])  # adopted already: refused in one line, the table unchanged
    assert again.returncode == 1 and snapshot.version() == DeltaTable(str(table)).version()
    assert "Traceback" not in again.stderr and "Nothing was changed" in again.stderr.strip().splitlines()[-1]

    # tidemark's checkpoint lost, the last file landed meanwhile: the table (unpartitioned, no windowStart folders,
    # written by two writers) says from its rows which windows it holds; recover replays only the others.
    shutil.rmtree(tmp_path / "checkpoint")
    _land(files[4:], landing)
    recovered = _cli(["recover", str(config), "--apply", "--json"])
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    plan = json.loads(recovered.stdout)["plan"]
    assert pd.Timestamp(plan["newest_committed_window"]) == rows["windowStart"].max()
    assert DeltaTable(str(table)).metadata().partition_columns == []
    everything = window_oracle([[f] for f in files], window=timedelta(minutes=15), watermark=timedelta(minutes=10))
    final = _table(table)
    assert len(final) > len(rows)  # the windows the last file closed were replayed
    assert_matches_oracle(final, everything)
    assert audit_sink(load_config(config)).ok
