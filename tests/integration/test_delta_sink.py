"""The Delta Lake sink on a real local Spark with Delta's own jars (tidemark's lock), read back with delta-rs.

Each run is `tidemark run` in its own process (a JVM with Delta's extension and catalog, as a user gets it). The
output is compared with the pandas oracle; the table is read with the `deltalake` package, never with tidemark.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction, write_deltalake

from tests.helpers import write_config
from tests.integration.test_recovery import _expected
from tests.oracles import count_malformed
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.formats import read_sink_transaction
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.quarantine import read_quarantine
from tidemark.recovery.audit import audit_sink
from tidemark.storage import open_storage

pytestmark = [pytest.mark.integration, pytest.mark.slow]
KEY = ["user", "windowStart"]


# The driver kills itself (Python and its JVM: the process group) right after batch N's Delta commit returned and
# before Spark writes that batch's commits/<N>: the moment only the sink's own idempotence covers.
_KILLED_AFTER = """
import os, signal, sys
from pyspark.sql.streaming.readwriter import DataStreamWriter
real = DataStreamWriter.foreachBatch
def foreach_batch(self, func):
    def wrapped(frame, batch):
        func(frame, batch)
        if batch == {batch}:
            os.killpg(os.getpgrp(), signal.SIGKILL)
    return real(self, wrapped)
DataStreamWriter.foreachBatch = foreach_batch
from tidemark.cli.main import main
sys.exit(main({argv!r}))
"""


def _run(config: Path, *, kill_after_batch: int | None = None, debug: bool = False) -> subprocess.CompletedProcess[str]:
    """`tidemark run --available-now` in a new process group (killed after a batch's Delta commit when asked)."""
    argv = [*(["--debug"] if debug else []), "run", str(config), "--available-now"]
    script = _KILLED_AFTER.format(batch=kill_after_batch, argv=argv)
    command = (
        [sys.executable, "-c", script]
        if kill_after_batch is not None
        else [sys.executable, "-m", "tidemark.cli.main", *argv]
    )
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, check=False, start_new_session=True
    )


def _cli(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """A tidemark command in its own process (its own JVM: the test process's session has no Delta jars)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    command = [sys.executable, "-m", "tidemark.cli.main", *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


def _hive(root: Path) -> dict[str, object]:
    """[spark] settings of a Hive metastore on Derby under root (a catalog that outlives each run's JVM)."""
    return {
        "conf": {
            "spark.sql.catalogImplementation": "hive",
            "spark.sql.warehouse.dir": str(root / "warehouse"),
            "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={root / 'metastore'};create=true",
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={root}",
        }
    }


def audit_sink_line(config: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`tidemark audit CONFIG`'s one line when it cannot run (it must exit 1). In this process: the refusal comes
    before any Spark, and the CLI's entry renders it as the command does."""
    capsys.readouterr()
    code = main(["audit", str(config)])
    stderr = capsys.readouterr().err
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
    return lines[0]


def _commits(root: Path) -> set[int]:
    return {int(p.name) for p in (root / "checkpoint" / "commits").glob("[0-9]*")}


def _table(path: Path) -> pd.DataFrame:
    """The table as delta-rs' SQL engine reads it (deletion vectors applied; its pyarrow route refuses them)."""
    rows = QueryBuilder().register("t", DeltaTable(str(path))).execute("SELECT * FROM t").read_all()
    frame = pa.table(rows).to_pandas()
    frame["windowStart"] = pd.to_datetime(frame["windowStart"], utc=True)
    return frame.sort_values(KEY).reset_index(drop=True)


def _assert_exact(path: Path, expected: pd.DataFrame) -> None:
    actual = _table(path)
    assert not actual.duplicated(KEY).any(), actual[actual.duplicated(KEY, keep=False)]
    merged = actual.merge(expected, on=KEY, how="outer", suffixes=("", "_oracle"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"][KEY]
    assert (merged["count"] == merged["count_oracle"]).all()
    assert (merged["value_sum"] - merged["value_sum_oracle"]).abs().max() < 1e-6


@pytest.mark.reliability(fault="driver kill", storage="local", sink="delta")
@pytest.mark.reliability(fault="checkpoint lost + recover", storage="local", sink="delta")
def test_delta_sink_is_exact_through_a_kill_between_its_commit_and_spark_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Three files: two before the kill (it comes after batch 1), one after it (a batch past the re-run one).
    data = generate_events(tmp_path / "all", events=300, keys=3, files=3, seed=7, malformed_fraction=0.06)
    (tmp_path / "landing").mkdir()
    files = list(data.files)
    config = write_config(tmp_path, sink={"format": "delta", "path": "output"})
    # Two files land; the run is killed the moment a batch's Delta commit is there and its Spark commit is not.
    for file in files[:2]:
        shutil.copy2(file, tmp_path / "landing" / file.name)
    killed = _run(config, kill_after_batch=1)
    assert killed.returncode == -9, killed.stderr[-2000:]
    commits = {int(p.name) for p in (tmp_path / "checkpoint" / "commits").glob("[0-9]*")}
    assert commits == {0}, commits  # batch 1 is in the table, not in Spark's commit log
    killed_at = DeltaTable(str(tmp_path / "output")).transaction_version("tidemark:t")
    transaction = read_sink_transaction(open_storage(str(tmp_path / "checkpoint")))
    assert transaction is not None and transaction.app_id == "tidemark:t" and transaction.base == 0
    # The rest lands; the rerun re-runs the killed batch (Delta skips it: same transaction version) and goes on.
    for file in files[2:]:
        shutil.copy2(file, tmp_path / "landing" / file.name)
    done = _run(config, debug=True)
    assert done.returncode == 0, done.stderr[-2000:]
    _assert_exact(tmp_path / "output", _expected(files))
    # Each malformed line quarantined once, the killed batch's too: its re-run's plan ran (tidemark's Delta writer
    # runs it through Spark's no-op sink when the table has its transaction), unlike a file sink's skip
    # (test_quarantine_rerun.py).
    records = read_quarantine(str(tmp_path / "quarantine"))
    assert sorted(r["raw"] for r in records) == sorted(set(r["raw"] for r in records))
    assert len(records) == count_malformed(files) and any(r["batch_id"] == 1 for r in records), len(records)

    # The table's log (read with delta-rs): the pipeline's transaction at the newest committed batch's version, one
    # commit per batch, never two for one transaction version (the re-run batch was skipped).
    table = DeltaTable(str(tmp_path / "output"))
    committed = max(int(p.name) for p in (tmp_path / "checkpoint" / "commits").glob("[0-9]*"))
    assert table.transaction_version("tidemark:t") == transaction.version_of(committed)
    log = tmp_path / "output" / "_delta_log"
    versions = [
        json.loads(line)["txn"]["version"]
        for commit in sorted(log.glob("*.json"))
        for line in commit.read_text().splitlines()
        if '"txn"' in line and "tidemark:t" in line
    ]
    assert len(versions) == len(set(versions)), versions
    assert killed_at == transaction.version_of(1) and killed_at in versions

    # audit reads the table's log: each committed batch has exactly one commit carrying its transaction; another
    # writer's commit on the same table is told apart; a commit written twice for one batch is a violation.
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
    assert [r.batch for r in audit.batches] == sorted(_commits(tmp_path))
    assert all(r.in_sink_log for r in audit.batches) and audit.data_files == len(table.file_uris())
    assert sum(r.rows or 0 for r in audit.batches) == len(_table(tmp_path / "output"))

    # checkpoint inspect --sink reads the table: its version and files as delta-rs sees them, the batch this
    # checkpoint last wrote, and (at a low threshold) the small files a streaming append leaves, with the fix.
    argv = ["checkpoint", "inspect", str(tmp_path / "checkpoint"), "--sink", str(tmp_path / "output")]
    assert main([*argv, "--json", "--max-delta-files", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    delta = report["sink"]
    assert (delta["version"], delta["files"]) == (table.version(), len(table.file_uris()))
    assert (delta["app_id"], delta["last_batch"]) == ("tidemark:t", committed)
    assert delta["rows"] == len(_table(tmp_path / "output"))
    small = [f for f in report["findings"] if f["code"] == "DELTA_SMALL_FILES"]
    assert len(small) == 1 and "OPTIMIZE delta.`" in small[0]["fix"], report["findings"]
    assert main(argv) == 0
    assert "DELTA_SMALL_FILES" not in capsys.readouterr().out  # the default threshold: 1,000 files

    # The checkpoint lost: a new query would write every window again; the run refuses in one line, table unchanged.
    shutil.rmtree(tmp_path / "checkpoint")
    refused = _run(config)
    assert refused.returncode != 0
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert "already holds this pipeline's output" in lines[-1] and "Traceback" not in refused.stderr, lines
    assert DeltaTable(str(tmp_path / "output")).version() == table.version()
    # recover --apply replays only the windows the table lacks, into a new checkpoint whose transactions start
    # above the lost one's; a restart afterwards keeps the replay's filter.
    recovered = _cli(["recover", str(config), "--apply"])
    assert recovered.returncode == 0, recovered.stderr[-2000:]
    assert "verified" in recovered.stdout and "0 duplicate" in recovered.stdout, recovered.stdout
    _assert_exact(tmp_path / "output", _expected(files))
    renewed = read_sink_transaction(open_storage(str(tmp_path / "checkpoint")))
    assert renewed is not None and renewed.base == table.transaction_version("tidemark:t") + 1
    assert _run(config).returncode == 0
    _assert_exact(tmp_path / "output", _expected(files))
    audit = audit_sink(load_config(config))
    assert audit.ok and any("earlier checkpoints" in n for n in audit.notes), (audit.violations, audit.notes)

    # Other writers on the table (rows of their own under another app id, then a compaction that rewrites every
    # file) are told apart; a second commit carrying batch 0's transaction with rows the table already has is
    # found twice over: the batch written twice, and its (key, window) rows repeated.
    rows = DeltaTable(str(tmp_path / "output")).to_pyarrow_table()
    theirs = rows.slice(0, 2).set_column(rows.schema.get_field_index("user"), "user", pa.array(["x", "y"]))
    write_deltalake(
        str(tmp_path / "output"),
        theirs,
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction("someone-else", 5)]),
    )
    DeltaTable(str(tmp_path / "output")).optimize.compact()
    other = audit_sink(load_config(config))
    assert other.ok, other.violations
    assert any("2 commit(s) by other writers (OPTIMIZE, someone-else)" in n for n in other.notes), other.notes
    assert other.rows_on_storage == len(rows) + 2
    write_deltalake(
        str(tmp_path / "output"),
        rows.slice(0, 3),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction("tidemark:t", renewed.version_of(0))]),
    )
    kinds = {v.kind.value: v for v in audit_sink(load_config(config)).violations}
    assert set(kinds) == {"batch-written-twice", "duplicate-key"}, kinds
    assert kinds["batch-written-twice"].batches == (0,) and kinds["duplicate-key"].count == 3


def test_rollback_to_a_batch_undoes_its_later_commits_and_the_rerun_is_exact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`recover --to-batch` on a Delta sink: Delta's RESTORE, in one commit that also sets the pipeline's transaction
    back; a kill between that commit and the checkpoint's moves is refused by `run` and finished by the rollback run
    again; the rerun equals the oracle; after a compaction (OPTIMIZE) the RESTORE takes it back with the batches.

    The sink is a catalog table (`[sink] table`, a Hive metastore on Derby that outlives each run's JVM): the
    first run creates it, every run resolves the name again, and the tools (rollback, audit) find its folder in the
    checkpoint without Spark; once the checkpoint is lost, `recover` looks the name up in the catalog. The table is
    unpartitioned (issue #55's case (a) with `partition_by = []`, once refused by `recover`)."""
    from tidemark.errors import UsageError
    from tidemark.formats import mark_sink_rollback, read_sink_rollback
    from tidemark.recovery.rollback import roll_back
    from tidemark.sinks import sink_of

    data = generate_events(tmp_path / "landing", events=400, keys=3, files=4, seed=11)
    files = list(data.files)
    # Unpartitioned (`partition_by = []`): the table holds the window start as a column only, so `recover` reads
    # which windows it holds from its rows (a key/window projection), not from partition values.
    sink = {"format": "delta", "path": None, "table": "events", "partition_by": []}
    config = write_config(tmp_path, sink=sink, spark=_hive(tmp_path))
    assert "is not known yet" in audit_sink_line(config, capsys)  # no run has resolved the name: one line, exit 1
    first = _run(config)
    assert first.returncode == 0, first.stderr[-2000:]
    output = tmp_path / "warehouse" / "events"  # the Hive catalog's managed location of `events`
    recorded = read_sink_transaction(open_storage(str(tmp_path / "checkpoint")))
    assert recorded is not None and Path(recorded.table) == output
    before = DeltaTable(str(output))
    assert before.metadata().partition_columns == []
    committed = sorted(_commits(tmp_path))
    assert committed[-1] >= 3
    # Back to batch 2, not 1: the later batches are undone all the same, and every replay after it (the rerun, the
    # recovery once the checkpoint is lost) re-runs one batch fewer.
    to = 2

    settings = load_config(config)
    dry = roll_back(settings, to)
    assert dry.plan.table is not None and not dry.applied
    undone = [c.batch for c in dry.plan.table.undone]
    assert undone and all(b > to for b in undone) and dry.plan.table.reset_to is not None
    assert DeltaTable(str(output)).version() == before.version()  # a dry run writes nothing
    assert main(["recover", str(config), "--to-batch", str(to)]) == 0
    assert f"{len(undone)} commit(s) of batches after {to} undone" in capsys.readouterr().out

    # Killed between the table's undo commit and the checkpoint's moves: the table is back, the checkpoint not.
    checkpoint = open_storage(str(tmp_path / "checkpoint"))
    transaction = read_sink_transaction(checkpoint)
    assert transaction is not None
    mark_sink_rollback(checkpoint, to)
    sink_of(settings).apply_table_rollback(checkpoint, dry.plan.table)
    table = DeltaTable(str(output))
    assert table.version() == before.version() + 1
    assert table.transaction_version(transaction.app_id) == transaction.version_of(to)
    assert len(table.file_uris()) == len(before.file_uris()) - len(dry.plan.table.files)
    refused = _run(config)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode != 0 and f"--to-batch {to} --apply" in lines[-1] and "Traceback" not in refused.stderr
    assert sorted(_commits(tmp_path)) == committed  # the run changed nothing
    with pytest.raises(UsageError, match=f"--to-batch {to} --apply"):  # not another batch while the table is at it
        roll_back(settings, to - 1)

    finished = roll_back(settings, to, apply=True)
    assert finished.plan.table is not None and finished.plan.table.reset_to is None  # the table was done already
    assert sorted(_commits(tmp_path)) == list(range(to + 1)) and read_sink_rollback(checkpoint) is None
    assert DeltaTable(str(output)).version() == before.version() + 1

    done = _run(config)
    assert done.returncode == 0, done.stderr[-2000:]
    _assert_exact(output, _expected(files))
    table = DeltaTable(str(output))
    newest = max(_commits(tmp_path))
    assert table.transaction_version(transaction.app_id) == transaction.version_of(newest)
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
    assert any("undone by `tidemark recover --to-batch`" in n for n in audit.notes), audit.notes
    assert sum(r.rows or 0 for r in audit.batches) == len(_table(output))

    # A compaction (OPTIMIZE changes no data) rewrote every batch's files with the others': Delta's RESTORE takes it
    # back with the undone batches, rows as they were at batch 2; the transaction goes back with them.
    table.optimize.compact()
    again = roll_back(settings, to)
    assert again.plan.table is not None and again.plan.table.restore_version is not None
    at_batch = DeltaTable(str(output), version=again.plan.table.restore_version).to_pandas()
    assert main(["recover", str(config), "--to-batch", str(to), "--apply"]) == 0
    capsys.readouterr()
    assert sorted(_commits(tmp_path)) == list(range(to + 1))
    restored = DeltaTable(str(output))
    assert restored.transaction_version(transaction.app_id) == transaction.version_of(to)
    assert restored.history(1)[0]["operation"] == "RESTORE"
    assert 0 < len(at_batch) < len(_expected(files))
    pd.testing.assert_frame_equal(
        restored.to_pandas().sort_values(KEY).reset_index(drop=True), at_batch.sort_values(KEY).reset_index(drop=True)
    )

    # The checkpoint lost, and with it the folder it recorded: the tools that read without Spark say so in one
    # line; `recover` looks the name up in the catalog and replays only the windows the table lacks: exact again.
    shutil.rmtree(tmp_path / "checkpoint")
    assert "is not known yet" in audit_sink_line(config, capsys)
    recovered = _cli(["recover", str(config), "--apply"])
    assert recovered.returncode == 0, recovered.stderr[-2000:]
    assert "verified" in recovered.stdout and "0 duplicate" in recovered.stdout, recovered.stdout
    _assert_exact(output, _expected(files))
    renewed = read_sink_transaction(checkpoint)
    # Above every version the table holds for the pipeline (it was rolled back to batch 2's).
    assert renewed is not None and Path(renewed.table) == output and renewed.base == transaction.version_of(to) + 1
    assert audit_sink(load_config(config)).ok
