"""The Delta sink's parts that need no JVM: the log reader (checked against delta-rs, which wrote the table), the
sink transaction a checkpoint keeps, what a Delta config asks of Spark, and the seams' grep."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.errors import EnvironmentProblem, InputError
from tidemark.formats import SinkTransaction, read_sink_transaction, read_snapshot, write_sink_transaction
from tidemark.needs import needs_of
from tidemark.sinks import DeltaSink, sink_of
from tidemark.spark import jars
from tidemark.spark.artifacts import DELTA_JARS, JarFeature, coordinates
from tidemark.storage import open_storage

SRC = Path(__file__).resolve().parents[2] / "src" / "tidemark"


def _append(path: Path, rows: int, app: str | None, version: int | None, part: str = "a 00:15") -> None:
    frame = pa.table({"k": [part] * rows, "v": list(range(rows))})
    props = CommitProperties(app_transactions=[Transaction(app, version)]) if app is not None else None
    write_deltalake(str(path), frame, mode="append", partition_by=["k"], commit_properties=props)


def test_the_log_reader_agrees_with_delta_rs_across_a_checkpoint(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _append(table, 3, "tidemark:p", 0)
    _append(table, 2, "other", 7, part="b")  # another writer on the same table
    _append(table, 4, "tidemark:p", 1)
    DeltaTable(str(table)).create_checkpoint()  # what came before is now read from the checkpoint's Parquet
    _append(table, 5, None, None, part="c")
    _append(table, 1, "tidemark:p", 2)
    # A partition value Hadoop escapes in the folder name and Delta encodes again in the log (a window start's colon):
    # paths read from the checkpoint's Parquet and from the commits must be the same names.
    DeltaTable(str(table)).delete("v = 0 AND k = 'a 00:15'")  # a remove and an add in one commit
    delta = DeltaTable(str(table))
    snapshot = read_snapshot(open_storage(str(table)), every_commit=True)
    assert snapshot.version == delta.version() == 5
    assert snapshot.checkpoint_version == 2
    assert {f"{table}/{p}" for p in snapshot.files} == {u.removeprefix("file://") for u in delta.file_uris()}
    for app in ("tidemark:p", "other"):
        assert snapshot.transactions[app] == delta.transaction_version(app)
    assert sum(f.rows or 0 for f in snapshot.files.values()) == len(delta.to_pyarrow_table())
    ours = [c for c in snapshot.commits if c.app_id == "tidemark:p"]
    assert [(c.txn_version, c.rows_added) for c in ours] == [(0, 3), (1, 4), (2, 1)]
    # Without every_commit only the commits after the checkpoint are read; the snapshot is the same.
    quick = read_snapshot(open_storage(str(table)))
    assert quick.files == snapshot.files and quick.transactions == snapshot.transactions
    assert [c.version for c in quick.commits] == [3, 4, 5]


def test_a_folder_without_a_log_is_no_table_and_a_damaged_log_is_one_line(tmp_path: Path) -> None:
    assert not read_snapshot(open_storage(str(tmp_path))).exists
    _append(tmp_path / "t", 1, None, None)
    log = tmp_path / "t" / "_delta_log" / "00000000000000000000.json"
    log.write_text(log.read_text() + "{not json\n")
    with pytest.raises(Exception, match="not JSON: the Delta log is damaged"):
        read_snapshot(open_storage(str(tmp_path / "t")))


def _delta_config(tmp_path: Path) -> Path:
    return write_config(tmp_path, sink={"format": "delta", "path": "output"})


def test_a_new_checkpoint_writes_above_every_version_the_table_holds(tmp_path: Path) -> None:
    config = load_config(_delta_config(tmp_path))
    sink = sink_of(config)
    assert isinstance(sink, DeltaSink)
    made = sink.transaction()  # no table yet: versions from 0
    assert made == SinkTransaction("tidemark:t", 0, str(tmp_path / "output"))
    assert read_sink_transaction(open_storage(config.checkpoint.location)) == made
    assert sink.transaction() == made  # kept: a restart names its batches as before
    # The table holds this pipeline's versions up to 41 and the checkpoint is gone: a new query would write its
    # windows again, so it refuses; a checkpoint that already ran (offsets) chooses a base above them.
    _append(tmp_path / "output", 2, "tidemark:t", 41)
    checkpoint = Path(config.checkpoint.location)
    (checkpoint / "_tidemark" / "sink-transaction.json").unlink()
    with pytest.raises(InputError, match=r"already holds this pipeline's output .*version 41"):
        sink.transaction()
    (checkpoint / "offsets").mkdir()
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0}\n{}\n')
    assert sink.transaction().base == 42


def test_a_damaged_sink_transaction_is_one_line(tmp_path: Path) -> None:
    store = open_storage(str(tmp_path))
    write_sink_transaction(store, SinkTransaction("a", 3, "x"))
    (tmp_path / "_tidemark" / "sink-transaction.json").write_text("{")
    with pytest.raises(Exception, match=r"sink-transaction\.json is damaged"):
        read_sink_transaction(store)


def test_a_delta_config_asks_for_delta_s_jars_and_settings(tmp_path: Path) -> None:
    needs = needs_of(load_config(_delta_config(tmp_path)))
    assert JarFeature.DELTA in needs.jar_groups
    assert needs.settings["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert needs.settings["spark.sql.catalog.spark_catalog"].endswith("DeltaCatalog")
    # The user's own extensions are kept, Delta's added after them.
    own = write_config(
        tmp_path, sink={"format": "delta", "path": "output"}, spark={"conf": {"spark.sql.extensions": "my.Ext"}}
    )
    assert needs_of(load_config(own)).settings["spark.sql.extensions"] == (
        "my.Ext,io.delta.sql.DeltaSparkSessionExtension"
    )
    parquet = needs_of(load_config(write_config(tmp_path)))
    assert JarFeature.DELTA not in parquet.jar_groups and "spark.sql.extensions" not in parquet.settings


@pytest.mark.parametrize(
    ("master", "partitions"), [("local[3]", "3"), ("local", "1"), ("local[*]", None), ("spark://h:7077", None)]
)
def test_delta_rebuilds_its_state_in_a_local_jvm_s_task_slots(
    tmp_path: Path, master: str, partitions: str | None
) -> None:
    import os

    from tidemark.sinks.delta import SNAPSHOT_PARTITIONS

    config = write_config(tmp_path, sink={"format": "delta", "path": "output"}, spark={"master": master})
    settings = needs_of(load_config(config)).settings
    expected = str(os.cpu_count()) if master == "local[*]" else partitions
    assert settings.get(SNAPSHOT_PARTITIONS) == expected  # a cluster master keeps Delta's own default (50)
    own = write_config(
        tmp_path, sink={"format": "delta", "path": "output"}, spark={"master": master, "conf": {SNAPSHOT_PARTITIONS: 7}}
    )
    assert needs_of(load_config(own)).settings[SNAPSHOT_PARTITIONS] == "7"  # the user's own setting wins


def test_delta_jars_are_locked_per_line_and_a_line_without_delta_is_one_line() -> None:
    lock = jars.packaged_lock()
    for line, wanted in DELTA_JARS.items():
        locked = lock[f"delta@spark-{line}"]
        assert sorted(j.coordinate for j in locked) == sorted(wanted)
        assert all(re.fullmatch(r"[0-9a-f]{64}", j.sha256) and j.size > 0 for j in locked)
    assert coordinates(JarFeature.DELTA, "4.1.4") == list(DELTA_JARS["4.1"])
    with pytest.raises(EnvironmentProblem, match=r"no release for Spark 4\.3: the Delta sink runs on Spark 3\.5"):
        coordinates(JarFeature.DELTA, "4.3.0")
    with pytest.raises(EnvironmentProblem, match=r"no release for Spark 4\.3"):
        jars.fetch([JarFeature.DELTA], "4.3.0", offline=True)


# A branch on the sink's format: `SinkFormat.X` compared, or the format's value tested, outside sinks/ and config/.
SINK_BRANCH = re.compile(r"SinkFormat\.\w+|sink\.format\b")


def test_no_branch_on_the_sink_format_outside_its_package() -> None:
    found = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).parts[0] not in ("sinks", "config")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if SINK_BRANCH.search(line)
    ]
    assert found == []


def test_commits_removed_by_log_retention_are_said_not_counted_missing(tmp_path: Path) -> None:
    table = tmp_path / "output"
    for version in range(4):
        _append(table, 1, "tidemark:t", version)
    DeltaTable(str(table)).create_checkpoint()  # at version 3: Delta's log cleanup may now remove 0..2
    _append(table, 1, "tidemark:t", 4)
    for version in range(3):
        (table / "_delta_log" / f"{version:020d}.json").unlink()
    config = load_config(_delta_config(tmp_path))
    checkpoint = open_storage(config.checkpoint.location)
    write_sink_transaction(checkpoint, SinkTransaction("tidemark:t", 0, str(table)))
    output = sink_of(config).table_output(checkpoint)
    assert output is not None and output.log_trimmed
    assert [c.batch for c in output.commits] == [3, 4]
    assert not output.checks_batch(1) and output.checks_batch(3)
    assert any("retention removed commits 0 to 2" in note for note in output.notes), output.notes
    snapshot = read_snapshot(open_storage(str(table)))  # the snapshot still has every file and the newest txn
    assert len(snapshot.files) == 5 and snapshot.transactions["tidemark:t"] == 4
    assert {f"{table}/{p}" for p in snapshot.files} == {
        u.removeprefix("file://") for u in DeltaTable(str(table)).file_uris()
    }


def test_an_error_raised_in_a_foreach_batch_function_is_named_in_the_one_line() -> None:
    """Spark wraps what the sink's foreachBatch function raised in py4j's "Python Proxy" text; the line shows the
    Python exception and its detail (here Delta's refusal of an append), not "Traceback (most recent call last):"."""
    from tidemark.pipeline.run import _first_line

    text = "\n".join(
        [
            "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch "
            "sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most recent "
            "call last):",
            '  File "/x/pyspark/sql/utils.py", line 162, in call',
            "    raise converted from None",
            "pyspark.errors.exceptions.captured.AnalysisException: [DELTA_METADATA_MISMATCH] A metadata mismatch "
            "was detected when writing to the Delta table.",
            "- Partition columns do not match the partition columns of the table.",
            "Given: [`windowStart`]",
            "Table: []",
            "",
            "\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(x.scala:60)",
        ]
    )
    line = _first_line(text)
    assert line.startswith("AnalysisException: [DELTA_METADATA_MISMATCH]"), line
    assert "Given: [`windowStart`] Table: []" in line and "Traceback" not in line
    assert _first_line("plain failure\nsecond") == "plain failure"
