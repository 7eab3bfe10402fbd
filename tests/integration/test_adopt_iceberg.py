"""The cut-over of a plain-Spark job that writes Apache Iceberg (Spark's own `format("iceberg")` streaming sink into
an unpartitioned table of a Hadoop catalog) to tidemark, in place: tidemark appends to the old job's own table from
the first window that was still open (its snapshots carry tidemark's transaction, the old job's Spark's query id).
Then the table is compacted by Iceberg's own `rewrite_data_files`, tidemark's checkpoint is lost, `recover --apply`
replays what the table lacks and `run` goes on. After each step the table, read with pyiceberg from its newest
metadata file (never with tidemark), equals a pandas computation of one continuous job over every file: nothing
lost, nothing twice.

The old job runs in a process of its own, in a plain session with Iceberg's runtime jar from tidemark's lock (the
tests' shared session has none) and a catalog of its own name; the query is plain PySpark. Its session stays open
and later runs the compaction, as a maintenance job would (one JVM start fewer).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest

from tests.helpers import write_config
from tests.integration.test_adopt import SCHEMA, _land, listing
from tests.integration.test_iceberg_sink import _cli, _env, _run, _static
from tests.oracles import assert_matches_oracle, window_oracle
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.pipeline.generate import generate_events
from tidemark.recovery.audit import audit_sink

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SINK = {
    "format": "iceberg",
    "path": None,
    "table": "lake.clicks",
    "catalog": {"type": "hadoop", "warehouse": "warehouse"},
}
# The old job, as a user wrote it: a session with Iceberg's runtime from tidemark's lock and a Hadoop catalog named
# `c`; window counts per user appended by Spark's Iceberg sink to a table it made without partitions. Its session
# then waits for a line on stdin and compacts the table with Iceberg's own procedure (every file: a `replace`
# snapshot). The catalog's table cache is off: tidemark appends to the table in between.
_OLD_JOB = """
import sys
from pyspark.sql import SparkSession, functions as F
from tidemark.spark.artifacts import JarFeature
from tidemark.spark.jars import fetch
from tests.integration.test_adopt import window_counts
warehouse, landing, checkpoint = sys.argv[1:4]
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.jars", ",".join(str(p) for p in fetch([JarFeature.ICEBERG]).paths))
         .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
         .config("spark.sql.catalog.c", "org.apache.iceberg.spark.SparkCatalog")
         .config("spark.sql.catalog.c.type", "hadoop")
         .config("spark.sql.catalog.c.warehouse", warehouse)
         .config("spark.sql.catalog.c.cache-enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
events = (
    spark.readStream.schema({schema!r})
    .option("maxFilesPerTrigger", 1)
    .json(landing)
    .withColumn("ts", F.to_timestamp("ts"))
    .withWatermark("ts", "10 minutes")
)
counts = window_counts(events)
spark.sql("CREATE NAMESPACE IF NOT EXISTS c.lake")
spark.createDataFrame([], counts.schema).writeTo("c.lake.clicks").using("iceberg").create()
query = (
    counts.writeStream.format("iceberg").outputMode("append")
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .toTable("c.lake.clicks")
)
query.awaitTermination()
print("query id", query.id, flush=True)
if sys.stdin.readline().strip() == "compact":
    spark.sql("CALL c.system.rewrite_data_files(table => 'lake.clicks', options => map('rewrite-all', 'true'))")
    print("compacted", flush=True)
spark.stop()
"""


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


@pytest.fixture
def old_job(tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    """Starts the old job's process (on tmp_path's landing, warehouse and old-checkpoint); killed by its pid if the
    test ends before it does."""
    argv = [str(tmp_path / "warehouse"), str(tmp_path / "landing"), str(tmp_path / "old-checkpoint")]
    command = [sys.executable, "-c", _OLD_JOB.format(schema=SCHEMA), *argv]
    started: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        # Spark's log goes to a file: a full stderr pipe nobody reads while the job runs would block it.
        with (tmp_path / "old-job.log").open("w") as log:
            pipe = subprocess.PIPE
            started.append(subprocess.Popen(command, env=_env(), text=True, stdin=pipe, stdout=pipe, stderr=log))
        return started[-1]

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def test_a_plain_spark_iceberg_job_moves_to_tidemark_in_its_own_table_through_compaction_and_a_lost_checkpoint(
    spark: SparkSession,
    tmp_path: Path,
    old_job: Callable[[], subprocess.Popen[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    generate_events(tmp_path / "events", events=600, keys=3, files=6, seed=23)
    files = sorted((tmp_path / "events").glob("events-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    landing = tmp_path / "landing"
    landing.mkdir()
    _land(files[:2], landing)
    table = tmp_path / "warehouse" / "lake" / "clicks"
    job = old_job()
    assert job.stdout is not None and job.stdin is not None
    line = "-"
    while line and not line.startswith("query id"):  # the query's id, once its batches are done (it stays open)
        line = job.stdout.readline()
    assert line, (tmp_path / "old-job.log").read_text()[-3000:]
    query_id = line.split()[-1]
    old_rows = _table(table)
    assert len(old_rows) > 0 and _static(table).spec().fields == ()  # unpartitioned
    old_snapshots = _summaries(table)
    assert old_snapshots and all(s.get("spark.sql.streaming.queryId") == query_id for s in old_snapshots[1:])
    old_checkpoint_before = listing(tmp_path / "old-checkpoint")
    _land(files[2:3], landing)  # arrived while the job was being switched

    config = write_config(tmp_path, sink=SINK)
    args = ["adopt", str(config), "--from-checkpoint", str(tmp_path / "old-checkpoint"), "--old-sink", str(table)]
    # The dry run in this process, on the tests' shared session: it plans from the old checkpoint's offsets and the
    # table's rows (pyiceberg); it writes nothing and needs no Iceberg jar. The apply is a command of its own.
    capsys.readouterr()
    assert main([*args, "--json"]) == 0, capsys.readouterr().err[-2000:]
    plan = json.loads(capsys.readouterr().out)["plan"]
    resume = pd.Timestamp(plan["resume_from"])
    assert plan["old_sink"]["rows"] == len(old_rows)
    assert old_rows["windowStart"].max() < resume  # every window the old job emitted starts before the replay
    assert len(_summaries(table)) == len(old_snapshots) and not (tmp_path / "checkpoint").exists()  # a dry run

    applied = _cli([*args, "--apply"])
    assert applied.returncode == 0, applied.stderr[-2000:]
    _land(files[3:4], landing)
    done = _run(config)
    assert done.returncode == 0, done.stderr[-2000:]
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
    again = _cli([*args, "--apply"])  # adopted already: refused in one line, the table unchanged
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert "Nothing was changed" in again.stderr.strip().splitlines()[-1]
    assert len(_summaries(table)) == len(old_snapshots) + len(ours)

    # Iceberg's compaction rewrites every file of both writers into new ones (a `replace` snapshot).
    out, _ = job.communicate("compact\n", timeout=300)
    assert job.returncode == 0 and "compacted" in out, (tmp_path / "old-job.log").read_text()[-3000:]
    current = _static(table).current_snapshot()
    assert current is not None and current.summary is not None and current.summary.operation.value == "replace"
    assert_matches_oracle(_table(table), _oracle(files[:4]))

    # tidemark's checkpoint lost, a file landed meanwhile: the compacted table (unpartitioned, two writers) says from
    # its rows which windows it holds; recover replays only the others, and the run after it goes on.
    shutil.rmtree(tmp_path / "checkpoint")
    _land(files[4:5], landing)
    recovered = _cli(["recover", str(config), "--apply", "--json"])
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    recovery = json.loads(recovered.stdout)
    assert pd.Timestamp(recovery["plan"]["newest_committed_window"]) == rows["windowStart"].max()
    assert recovery["verification"]["duplicates"] == 0
    assert_matches_oracle(_table(table), _oracle(files[:5]))
    _land(files[5:], landing)
    ran = _run(config)
    assert ran.returncode == 0, ran.stderr[-2000:]
    final = _table(table)
    assert len(final) > len(rows)
    assert_matches_oracle(final, _oracle(files))
    audit = audit_sink(load_config(config))
    assert audit.ok and any("other writers" in n for n in audit.notes), (audit.violations, audit.notes)
