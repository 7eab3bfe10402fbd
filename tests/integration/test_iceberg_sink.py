"""The Apache Iceberg sink on a real local Spark with Iceberg's own runtime jar (tidemark's lock), read back with
pyiceberg.

tidemark's commands run in this process, on the tests' shared session (tests/conftest.py gives it Iceberg's runtime
and SQL extensions), as `tidemark` would run them in a notebook's session; only the run killed after an append is
a process of its own (the kill is what it tests). The output is compared with the pandas oracle; the table is read
with pyiceberg from its newest metadata file (pyiceberg has no Hadoop catalog), never with tidemark.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest
from pyiceberg.table import StaticTable
from pyiceberg.table.snapshots import ancestors_of

from tests.helpers import write_config
from tests.integration.test_recovery import _expected
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.formats import read_sink_transaction
from tidemark.pipeline.generate import generate_events
from tidemark.recovery.audit import audit_sink
from tidemark.storage import open_storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]
KEY = ["user", "windowStart"]
SINK = {
    "format": "iceberg",
    "path": None,
    "table": "lake.clicks",
    "catalog": {"type": "hadoop", "warehouse": "warehouse"},
}

# The driver kills itself (Python and its JVM: the process group) right after batch N's Iceberg append returned and
# before Spark writes that batch's commits/<N>: the moment only the sink's own idempotence covers.
_KILLED_AFTER = """
import os, signal, sys
from pyspark.sql.streaming.readwriter import DataStreamWriter
real = DataStreamWriter.foreachBatch
reached = {reached!r}
def foreach_batch(self, func):
    def wrapped(frame, batch):
        func(frame, batch)
        if batch == {batch}:
            open(reached, "w").close()
            os.killpg(os.getpgrp(), signal.SIGKILL)
    return real(self, wrapped)
DataStreamWriter.foreachBatch = foreach_batch
from tidemark.cli.main import main
sys.exit(main({argv!r}))
"""


def other_writers(spark: SparkSession, warehouse: Path) -> None:
    """Other writers on the table, as another application in a session of its own (a new session of the shared
    Spark: its own settings and catalogs) with a catalog of its own name: an append carrying its own snapshot
    property, then Iceberg's compaction (a `replace` snapshot)."""
    theirs_session = spark.newSession()
    name = f"other_{uuid.uuid4().hex[:8]}"
    theirs_session.conf.set(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
    theirs_session.conf.set(f"spark.sql.catalog.{name}.type", "hadoop")
    theirs_session.conf.set(f"spark.sql.catalog.{name}.warehouse", str(warehouse))
    theirs = theirs_session.table(f"{name}.lake.clicks").limit(2)
    theirs = theirs.selectExpr("concat('other-', user) AS user", "* EXCEPT (user)")
    theirs.writeTo(f"{name}.lake.clicks").option("snapshot-property.tidemark.app", "someone-else").append()
    compact = f"CALL {name}.system.rewrite_data_files(table => 'lake.clicks', options => map('rewrite-all', 'true'))"
    theirs_session.sql(compact).collect()


def _env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable}


def _killed_run(config: Path, kill_after_batch: int) -> subprocess.CompletedProcess[str]:
    """`tidemark run --available-now` in a new process group, killed after a batch's Iceberg append."""
    argv = ["run", str(config), "--available-now"]
    reached = str(config.parent / "kill-reached")
    script = _KILLED_AFTER.format(batch=kill_after_batch, argv=argv, reached=reached)
    return subprocess.run(
        [sys.executable, "-c", script],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        start_new_session=True,
    )


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """A tidemark command in this process, on the shared session: its exit code, stdout and stderr."""
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def run(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`tidemark run CONFIG --available-now` in this process (cli)."""
    return cli(["run", str(config), "--available-now"], capsys)


def _commits(root: Path) -> set[int]:
    return {int(p.name) for p in (root / "checkpoint" / "commits").glob("[0-9]*")}


def _static(table: Path) -> StaticTable:
    """The table as pyiceberg opens it from its newest metadata file (version-hint.text names it)."""
    version = int((table / "metadata" / "version-hint.text").read_text().strip())
    return StaticTable.from_metadata(str(table / "metadata" / f"v{version}.metadata.json"))


def _table(path: Path) -> pd.DataFrame:
    frame = _static(path).scan().to_arrow().to_pandas()
    frame["windowStart"] = pd.to_datetime(frame["windowStart"], utc=True)
    return frame.sort_values(KEY).reset_index(drop=True)


def _assert_exact(path: Path, expected: pd.DataFrame) -> None:
    actual = _table(path)
    assert not actual.duplicated(KEY).any(), actual[actual.duplicated(KEY, keep=False)]
    merged = actual.merge(expected, on=KEY, how="outer", suffixes=("", "_oracle"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"][KEY]
    assert (merged["count"] == merged["count_oracle"]).all()
    assert (merged["value_sum"] - merged["value_sum_oracle"]).abs().max() < 1e-6


def _ours(path: Path, app_id: str) -> list[int]:
    """tidemark.version of every snapshot of the current lineage carrying app_id, oldest first."""
    table = _static(path)
    versions = []
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {}
        if summary.get("tidemark.app") == app_id:
            versions.append(int(summary["tidemark.version"]))
    return versions[::-1]


def test_iceberg_sink_is_exact_through_a_kill_a_rollback_a_lost_checkpoint_and_other_writers(
    iceberg_session: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Three files: two before the kill (it comes after batch 1), one after it (a batch past the re-run one); a fourth
    # lands while the checkpoint is lost the second time.
    data = generate_events(tmp_path / "all", events=400, keys=3, files=4, seed=7)
    (tmp_path / "landing").mkdir()
    files, last = list(data.files)[:3], list(data.files)[3]
    config = write_config(tmp_path, sink=SINK)
    output = tmp_path / "warehouse" / "lake" / "clicks"
    for file in files[:2]:
        shutil.copy2(file, tmp_path / "landing" / file.name)
    killed = _killed_run(config, kill_after_batch=1)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert (tmp_path / "kill-reached").exists()
    assert _commits(tmp_path) == {0}  # batch 1 is in the table, not in Spark's commit log
    transaction = read_sink_transaction(open_storage(str(tmp_path / "checkpoint")))
    assert transaction is not None and transaction.app_id == "tidemark:t" and transaction.base == 0
    assert _ours(output, "tidemark:t") == [0, 1]
    # The table was created partitioned by the window start (identity), format version 2.
    created = _static(output)
    assert [f.name for f in created.spec().fields] == ["windowStart"] and created.metadata.format_version == 2

    # The rest lands; the rerun re-runs the killed batch (its snapshot is in the table: not appended again).
    shutil.copy2(files[2], tmp_path / "landing" / files[2].name)
    code, _, err = run(config, capsys)
    assert code == 0, err[-2000:]
    _assert_exact(output, _expected(files))
    committed = max(_commits(tmp_path))
    versions = _ours(output, "tidemark:t")
    assert versions == list(range(committed + 1)), versions  # one snapshot per batch, none twice

    # audit reads the table's lineage: each committed batch has exactly one snapshot carrying its transaction.
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
    assert [r.batch for r in audit.batches] == sorted(_commits(tmp_path))
    assert all(r.in_sink_log for r in audit.batches)
    assert sum(r.rows or 0 for r in audit.batches) == len(_table(output))
    live = _static(output).inspect.files()
    assert audit.data_files == live.num_rows

    # recover --to-batch 1: Iceberg's own rollback_to_snapshot (no new snapshot: the later batches' snapshots leave
    # the lineage); the table holds batches 0 and 1 only, and the rerun appends the later ones again: exact.
    rows_through_1 = sum(r.rows or 0 for r in audit.batches if r.batch <= 1)
    snapshots = len(_static(output).metadata.snapshots)
    code, out, err = cli(["recover", str(config), "--to-batch", "1", "--apply"], capsys)
    assert code == 0, err[-2000:]
    assert "rollback_to_snapshot" in out, out
    assert sorted(_commits(tmp_path)) == [0, 1] and _ours(output, "tidemark:t") == [0, 1]
    assert len(_table(output)) == rows_through_1 < len(_expected(files))
    assert len(_static(output).metadata.snapshots) == snapshots  # no snapshot made, none removed
    code, _, err = run(config, capsys)
    assert code == 0, err[-2000:]
    _assert_exact(output, _expected(files))
    committed = max(_commits(tmp_path))  # the rerun may end with one more no-data batch than the first run
    assert committed >= 3 and _ours(output, "tidemark:t") == list(range(committed + 1))
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations

    # checkpoint inspect --sink reads the table: its snapshots and files as pyiceberg sees them, the batch this
    # checkpoint last wrote, and (at a low threshold) the small files and unexpired snapshots, each with its fix.
    argv = ["checkpoint", "inspect", str(tmp_path / "checkpoint"), "--sink", str(output)]
    assert main([*argv, "--json", "--max-delta-files", "1"]) == 0
    report = json.loads(capsys.readouterr().out)["sink"]
    assert (report["files"], report["rows"]) == (live.num_rows, len(_table(output)))
    assert (report["app_id"], report["last_batch"]) == ("tidemark:t", committed)
    assert report["snapshots"] == len(_static(output).metadata.snapshots)
    assert main([*argv, "--max-delta-files", "1"]) == 0
    shown = capsys.readouterr().out
    assert "ICEBERG_SMALL_FILES" in shown and "rewrite_data_files" in shown
    assert "ICEBERG_UNEXPIRED_SNAPSHOTS" in shown and "expire_snapshots" in shown
    assert main(argv) == 0
    assert "ICEBERG_SMALL_FILES" not in capsys.readouterr().out  # the default threshold: 1,000 files

    # The checkpoint lost: a new query would write every window again; the run refuses in one line, table unchanged.
    snapshot = _static(output).current_snapshot()
    assert snapshot is not None
    shutil.rmtree(tmp_path / "checkpoint")
    code, _, err = run(config, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and "Traceback" not in err
    assert "already holds this pipeline's output" in lines[-1], lines
    after = _static(output).current_snapshot()
    assert after is not None and after.snapshot_id == snapshot.snapshot_id
    # recover --apply replays only the windows the table lacks, into a new checkpoint whose versions start above
    # the lost one's; a run afterwards adds nothing twice.
    code, out, err = cli(["recover", str(config), "--apply"], capsys)
    assert code == 0, err[-2000:]
    assert "verified" in out and "0 duplicate" in out, out
    _assert_exact(output, _expected(files))
    # The recovery's archive is beside the checkpoint, none in the catalog's namespace folder.
    assert (tmp_path / ".tidemark-archive" / "checkpoint-recovery").is_dir()
    assert not (tmp_path / "warehouse" / "lake" / ".tidemark-archive").exists()
    renewed = read_sink_transaction(open_storage(str(tmp_path / "checkpoint")))
    assert renewed is not None and renewed.base == committed + 1
    # Lost again while a file lands, with the automatic recovery on: the run is not refused, it recovers by itself
    # (the plan `recover` makes) and goes on; nothing lost, nothing twice.
    shutil.rmtree(tmp_path / "checkpoint")
    files.append(last)
    shutil.copy2(last, tmp_path / "landing" / last.name)
    config = write_config(tmp_path, sink=SINK, checkpoint={"location": "checkpoint", "on_missing": "recover"})
    caplog.clear()
    code, _, err = run(config, capsys)
    assert code == 0, err[-2000:]
    # In this process the run's warnings reach pytest's log capture (a process of its own prints them on stderr).
    recovering = [r for r in caplog.records if "recovering from" in r.getMessage()]
    assert len(recovering) == 1 and recovering[0].levelname == "WARNING", caplog.text[-2000:]
    _assert_exact(output, _expected(files))
    audit = audit_sink(load_config(config))
    assert audit.ok and any("earlier checkpoints" in n for n in audit.notes), (audit.violations, audit.notes)

    # Other writers: another application's append and Iceberg's compaction (a `replace` snapshot that rewrites every
    # file). audit tells them apart; the windows are still read from the compacted files, and a recovery after
    # another lost checkpoint replays nothing twice.
    other_writers(iceberg_session, tmp_path / "warehouse")
    operations = [s.summary.operation.value for s in _static(output).metadata.snapshots if s.summary is not None]
    assert operations[-1] == "replace", operations
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
    assert any("2 snapshot(s) by other writers (replace, someone-else)" in n for n in audit.notes), audit.notes
    assert audit.rows_on_storage == len(_expected(files)) + 2
    # A rollback now would drop the other writers' snapshots: refused in one line before anything changes.
    capsys.readouterr()
    assert main(["recover", str(config), "--to-batch", "0", "--apply"]) != 0
    refusal = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(refusal) == 1 and "rollback_to_snapshot to before the undone batches would drop it" in refusal[0]
    assert _commits(tmp_path) and max(_commits(tmp_path)) > 0  # the checkpoint is untouched
    shutil.rmtree(tmp_path / "checkpoint")
    code, _, err = cli(["recover", str(config), "--apply"], capsys)
    assert code == 0, err[-2000:]
    table = _table(output)
    ours = table[~table["user"].str.startswith("other-")].reset_index(drop=True)
    assert len(table) == len(ours) + 2
    expected = _expected(files)
    assert len(ours) == len(expected) and not ours.duplicated(KEY).any()


def test_two_pipelines_with_their_own_warehouses_write_each_to_its_own_in_one_session(
    iceberg_session: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two configs, each with a Hadoop catalog of its own warehouse, run one after the other in one session (a
    # notebook's, the tests' shared one): Spark keeps a catalog it loaded under its name, so the second pipeline
    # must not create, write or roll back its table in the first one's warehouse.
    data = generate_events(tmp_path / "all", events=150, keys=3, files=2, seed=5)
    files = list(data.files)
    roots = {name: tmp_path / name for name in ("first", "second")}
    configs = {}
    for name, root in roots.items():
        (root / "landing").mkdir(parents=True)
        for file in files:
            shutil.copy2(file, root / "landing" / file.name)
        configs[name] = write_config(root, pipeline={"name": name}, sink=SINK)
        assert main(["run", str(configs[name]), "--available-now"]) == 0, capsys.readouterr().err[-2000:]
    for name, root in roots.items():
        output = root / "warehouse" / "lake" / "clicks"
        _assert_exact(output, _expected(files))
        # Each warehouse holds its own pipeline's snapshots only.
        apps = {dict(s.summary.additional_properties).get("tidemark.app") for s in _static(output).metadata.snapshots}
        assert apps == {f"tidemark:{name}"}, (name, apps)
    # A rollback of the first pipeline, after the second ran in the same session, undoes the first one's table.
    second = _static(roots["second"] / "warehouse" / "lake" / "clicks").current_snapshot()
    assert main(["recover", str(configs["first"]), "--to-batch", "0", "--apply"]) == 0, capsys.readouterr().err
    assert _ours(roots["first"] / "warehouse" / "lake" / "clicks", "tidemark:first") == [0]
    after = _static(roots["second"] / "warehouse" / "lake" / "clicks").current_snapshot()
    assert second is not None and after is not None and after.snapshot_id == second.snapshot_id
