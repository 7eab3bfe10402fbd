"""The cut-over of a plain-Spark job that writes Apache Iceberg (Spark's own `format("iceberg")` streaming sink into
an unpartitioned table of a Hadoop catalog) to tidemark, in place: tidemark appends to the old job's own table from
the first window that was still open (its snapshots carry tidemark's transaction, the old job's Spark's query id).
Then the table is compacted by Iceberg's own `rewrite_data_files`, tidemark's checkpoint is lost, `recover --apply`
replays what the table lacks and `run` goes on. After each step the table, read with pyiceberg from its newest
metadata file (never with tidemark), equals a pandas computation of one continuous job over every file: nothing
lost, nothing twice.

The old job runs in this process, in a session of its own (a new session of the tests' shared Spark, which carries
Iceberg's runtime jar from tidemark's lock: its own settings and catalogs) with a catalog of its own name; the query
is plain PySpark. Its session later runs the compaction, as a maintenance job would. tidemark's commands run in
this process too, on the shared session.
"""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest

from tests.helpers import write_config
from tests.integration.test_adopt import SCHEMA, _land, listing, window_counts
from tests.integration.test_iceberg_sink import _static
from tests.oracles import assert_matches_oracle, window_oracle
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.pipeline.generate import generate_events
from tidemark.recovery.audit import audit_sink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SINK = {
    "format": "iceberg",
    "path": None,
    "table": "lake.clicks",
    "catalog": {"type": "hadoop", "warehouse": "warehouse"},
}


def old_job(spark: SparkSession, warehouse: Path, landing: Path, checkpoint: Path) -> tuple[SparkSession, str]:
    """The old job, as a user wrote it: a session with a Hadoop catalog named `c`; window counts per user appended
    by Spark's Iceberg sink to a table it made without partitions, until the landed files are read (available now).
    Its session, and its query's id. The catalog's table cache is off: tidemark appends to the table later."""
    from pyspark.sql import functions as F

    session = spark.newSession()
    for key, value in {
        "spark.sql.catalog.c": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.c.type": "hadoop",
        "spark.sql.catalog.c.warehouse": str(warehouse),
        "spark.sql.catalog.c.cache-enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
    }.items():
        session.conf.set(key, value)
    events = (
        session.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(landing))
        .withColumn("ts", F.to_timestamp("ts"))
        .withWatermark("ts", "10 minutes")
    )
    counts = window_counts(events)
    session.sql("CREATE NAMESPACE IF NOT EXISTS c.lake")
    session.createDataFrame([], counts.schema).writeTo("c.lake.clicks").using("iceberg").create()
    query = (
        counts.writeStream.format("iceberg")
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .toTable("c.lake.clicks")
    )
    query.awaitTermination()
    return session, str(query.id)


def _table(path: Path) -> pd.DataFrame:
    frame = _static(path).scan().to_arrow().to_pandas()
    for column in ("windowStart", "windowEnd", "firstEventTime", "lastEventTime"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


def _oracle(files: list[Path]) -> pd.DataFrame:
    return window_oracle([[f] for f in files], window=timedelta(minutes=15), watermark=timedelta(minutes=10))


def _summaries(path: Path) -> list[dict[str, str]]:
    """Each snapshot's summary properties, oldest first."""
    table = _static(path)
    return [dict(s.summary.additional_properties) for s in table.metadata.snapshots if s.summary is not None]


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """A tidemark command in this process, on the shared session: its exit code, stdout and stderr."""
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_plain_spark_iceberg_job_moves_to_tidemark_in_its_own_table_through_compaction_and_a_lost_checkpoint(
    iceberg_session: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generate_events(tmp_path / "events", events=600, keys=3, files=6, seed=23)
    files = sorted((tmp_path / "events").glob("events-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    landing = tmp_path / "landing"
    landing.mkdir()
    _land(files[:2], landing)
    table = tmp_path / "warehouse" / "lake" / "clicks"
    job, query_id = old_job(iceberg_session, tmp_path / "warehouse", landing, tmp_path / "old-checkpoint")
    old_rows = _table(table)
    assert len(old_rows) > 0 and _static(table).spec().fields == ()  # unpartitioned
    old_snapshots = _summaries(table)
    assert old_snapshots and all(s.get("spark.sql.streaming.queryId") == query_id for s in old_snapshots[1:])
    old_checkpoint_before = listing(tmp_path / "old-checkpoint")
    _land(files[2:3], landing)  # arrived while the job was being switched

    config = write_config(tmp_path, sink=SINK)
    args = ["adopt", str(config), "--from-checkpoint", str(tmp_path / "old-checkpoint"), "--old-sink", str(table)]
    # The dry run plans from the old checkpoint's offsets and the table's rows (pyiceberg); it writes nothing.
    code, out, err = cli([*args, "--json"], capsys)
    assert code == 0, err[-2000:]
    plan = json.loads(out)["plan"]
    resume = pd.Timestamp(plan["resume_from"])
    assert plan["old_sink"]["rows"] == len(old_rows)
    assert old_rows["windowStart"].max() < resume  # every window the old job emitted starts before the replay
    assert len(_summaries(table)) == len(old_snapshots) and not (tmp_path / "checkpoint").exists()  # a dry run

    code, _, err = cli([*args, "--apply"], capsys)
    assert code == 0, err[-2000:]
    _land(files[3:4], landing)
    code, _, err = cli(["run", str(config), "--available-now"], capsys)
    assert code == 0, err[-2000:]
    assert listing(tmp_path / "old-checkpoint") == old_checkpoint_before
    rows = _table(table)
    assert_matches_oracle(rows, _oracle(files[:4]))
    # The old job's snapshots keep its query id; tidemark's carry its own transaction, from the replay point on.
    ours = [s for s in _summaries(table) if s.get("tidemark.app") == "tidemark:t"]
    assert ours and [int(s["tidemark.version"]) for s in ours] == list(range(len(ours)))
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
    assert any("other writers" in n for n in audit.notes), audit.notes
    assert sum(r.rows or 0 for r in audit.batches) == len(rows) - len(old_rows)
    code, _, err = cli([*args, "--apply"], capsys)  # adopted already: refused in one line, the table unchanged
    assert code == 1 and "Traceback" not in err
    assert "Nothing was changed" in err.strip().splitlines()[-1]
    assert len(_summaries(table)) == len(old_snapshots) + len(ours)

    # Iceberg's compaction rewrites every file of both writers into new ones (a `replace` snapshot).
    job.sql("CALL c.system.rewrite_data_files(table => 'lake.clicks', options => map('rewrite-all', 'true'))").collect()
    current = _static(table).current_snapshot()
    assert current is not None and current.summary is not None and current.summary.operation.value == "replace"
    assert_matches_oracle(_table(table), _oracle(files[:4]))

    # tidemark's checkpoint lost, a file landed meanwhile: the compacted table (unpartitioned, two writers) says from
    # its rows which windows it holds; recover replays only the others, and the run after it goes on.
    shutil.rmtree(tmp_path / "checkpoint")
    _land(files[4:5], landing)
    code, out, err = cli(["recover", str(config), "--apply", "--json"], capsys)
    assert code == 0, err[-3000:]
    recovery = json.loads(out)
    assert pd.Timestamp(recovery["plan"]["newest_committed_window"]) == rows["windowStart"].max()
    assert recovery["verification"]["duplicates"] == 0
    assert_matches_oracle(_table(table), _oracle(files[:5]))
    _land(files[5:], landing)
    code, _, err = cli(["run", str(config), "--available-now"], capsys)
    assert code == 0, err[-2000:]
    final = _table(table)
    assert len(final) > len(rows)
    assert_matches_oracle(final, _oracle(files))
    audit = audit_sink(load_config(config))
    assert audit.ok and any("other writers" in n for n in audit.notes), (audit.violations, audit.notes)
