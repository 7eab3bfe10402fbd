"""The Delta sink's parts that need no JVM: the log reader (checked against delta-rs, which wrote the table), the
sink transaction a checkpoint keeps, what a Delta config asks of Spark, and the seams' grep."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.context import PipelineContext
from tidemark.errors import EnvironmentProblem, InputError
from tidemark.formats import SinkTransaction, read_sink_transaction, write_sink_transaction
from tidemark.needs import needs_of
from tidemark.sinks import DeltaSink, sink_of
from tidemark.sinks.delta.log import read_commits
from tidemark.sinks.delta.table import read_table_snapshot, transaction_version
from tidemark.spark import jars
from tidemark.spark.artifacts import DELTA_JARS, JarFeature, coordinates
from tidemark.storage import open_storage

SRC = Path(__file__).resolve().parents[2] / "src" / "tidemark"


def _append(path: Path, rows: int, app: str | None, version: int | None, part: str = "a 00:15") -> None:
    frame = pa.table({"k": [part] * rows, "v": list(range(rows))})
    props = CommitProperties(app_transactions=[Transaction(app, version)]) if app is not None else None
    write_deltalake(str(path), frame, mode="append", partition_by=["k"], commit_properties=props)


def test_the_commit_reader_tells_each_commit_s_transaction_and_rows_across_a_checkpoint(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _append(table, 3, "tidemark:p", 0)
    _append(table, 2, "other", 7, part="b")  # another writer on the same table
    _append(table, 4, "tidemark:p", 1)
    DeltaTable(str(table)).create_checkpoint()
    _append(table, 5, None, None, part="c")
    _append(table, 1, "tidemark:p", 2)
    DeltaTable(str(table)).delete("v = 0 AND k = 'a 00:15'")  # a remove and an add in one commit
    delta = DeltaTable(str(table))
    log = read_commits(open_storage(str(table)))
    assert [c.version for c in log.commits] == list(range(delta.version() + 1)) and log.oldest_commit == 0
    assert log.checkpoint_version == 2
    ours = [c for c in log.commits if c.app_id == "tidemark:p"]
    assert [(c.txn_version, c.rows_added) for c in ours] == [(0, 3), (1, 4), (2, 1)]
    assert [c.operation for c in log.commits][-1] == "DELETE" and log.commits[-1].changes_data
    # The snapshot (delta-rs): the same files, rows with the deleted ones gone, partition values decoded.
    snapshot = read_table_snapshot(str(table))
    assert snapshot is not None and snapshot.version == delta.version() == 5
    assert {f"{table}/{f.path}" for f in snapshot.files} == {u.removeprefix("file://") for u in delta.file_uris()}
    assert snapshot.rows == len(delta.to_pyarrow_table()) == 3 + 2 + 4 + 5 + 1 - 3  # v = 0 in three of a's appends
    assert {f.partition_values["k"] for f in snapshot.files} == {"a 00:15", "b", "c"}
    assert transaction_version(str(table), "tidemark:p") == 2 == delta.transaction_version("tidemark:p")


def test_a_folder_without_a_log_is_no_table_and_a_damaged_log_is_one_line(tmp_path: Path) -> None:
    assert read_table_snapshot(str(tmp_path)) is None and not DeltaSink.claims(open_storage(str(tmp_path)))
    _append(tmp_path / "t", 1, None, None)
    assert DeltaSink.claims(open_storage(str(tmp_path / "t")))
    log = tmp_path / "t" / "_delta_log" / "00000000000000000000.json"
    log.write_text(log.read_text() + "{not json\n")
    with pytest.raises(Exception, match="not JSON: the Delta log is damaged"):
        read_commits(open_storage(str(tmp_path / "t")))


def _with_protocol(table: Path, protocol: dict[str, object]) -> None:
    """A commit of the protocol action alone, as a writer that enables a feature makes it."""
    version = DeltaTable(str(table)).version() + 1
    actions = [{"commitInfo": {"operation": "SET TBLPROPERTIES"}}, {"protocol": protocol}]
    (table / "_delta_log" / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_a_table_with_a_feature_tidemark_does_not_handle_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    from tidemark.errors import UsageError
    from tidemark.sinks.delta.protocol import unsupported
    from tidemark.sinks.delta.table import Protocol

    assert unsupported(Protocol(3, 7, ("deletionVectors", "v2Checkpoint"), ("deletionVectors", "appendOnly"))) == ()
    assert unsupported(Protocol(1, 2, (), ())) == ()
    assert unsupported(Protocol(3, 7, ("catalogManaged",), ("catalogManaged", "madeUp"))) == (
        "catalogManaged",
        "madeUp",
    )
    assert unsupported(Protocol(4, 8, (), ())) == ("reader version 4", "writer version 8")

    config = load_config(_delta_config(tmp_path))
    _append(tmp_path / "output", 2, "tidemark:t", 0)
    _with_protocol(tmp_path / "output", {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["madeUp"]})
    before = sorted(p.name for p in tmp_path.rglob("*"))
    sink = sink_of(config)
    with pytest.raises(UsageError, match=r"uses madeUp, which tidemark does not vouch for.*nothing was written"):
        sink.transaction()
    # A reader feature delta-rs does not know: the same one line (exit 2), from the reader's own refusal.
    _with_protocol(
        tmp_path / "output",
        {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["madeUp"], "writerFeatures": ["madeUp"]},
    )
    with pytest.raises(UsageError, match=r"reader feature tidemark does not vouch for .*madeUp"):
        sink.transaction()
    with pytest.raises(UsageError, match=r"madeUp"):
        sink.held_windows()
    assert UsageError.exit_code == 2
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted([*before, "00000000000000000002.json"])  # ours only


def test_the_same_table_under_another_spelling_keeps_its_transaction_and_a_replaced_table_is_refused(
    tmp_path: Path,
) -> None:
    output = tmp_path / "output"
    config = load_config(_delta_config(tmp_path))
    made = sink_of(config).transaction()
    assert made.table_id is None  # no table yet
    _append(output, 1, "tidemark:t", 0)
    for spelling in (f"file://{output}", f"file:{output}", f"{output}/", f"{tmp_path}/./output"):
        renamed = config.model_copy(update={"sink": config.sink.model_copy(update={"path": spelling})})
        kept = sink_of(renamed).transaction()
        assert (kept.app_id, kept.base, kept.table) == (made.app_id, made.base, made.table), spelling
        assert kept.table_id == DeltaTable(str(output)).metadata().id  # recorded once the table exists
    # The table deleted and made again at the same place: not the table the checkpoint wrote to.
    import shutil

    shutil.rmtree(output)
    _append(output, 1, None, None)
    with pytest.raises(InputError, match=r"is not the one the checkpoint .* wrote to .*it was replaced"):
        sink_of(config).transaction()


def test_a_file_uri_with_one_slash_is_a_location_not_a_relative_path(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, sink={"format": "delta", "path": f"file:{tmp_path}/out"}))
    assert config.sink.path == f"file:{tmp_path}/out"
    from tidemark.storage import parse_location

    assert parse_location(config.sink.path).same_place(parse_location(str(tmp_path / "out")))
    assert parse_location("wasbs://c@acct.blob.core.windows.net/a/b/").same_place(
        parse_location("abfss://c@acct.dfs.core.windows.net/a/b")
    )
    assert parse_location("s3a://bucket/x").same_place(parse_location("s3://bucket/x/"))
    assert not parse_location("s3a://bucket/x").same_place(parse_location("s3a://other/x"))
    assert not parse_location("wasbs://c@acct.blob.core.windows.net/a").same_place(
        parse_location("wasbs://c@other.blob.core.windows.net/a")
    )


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

    from tidemark.sinks.delta.sink import SNAPSHOT_PARTITIONS

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


# The grep tests of the connector seam (no branch on the sink's connector, no `_delta_log` outside sinks/delta/):
# tests/unit/test_sink_seam.py.


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
    snapshot = read_table_snapshot(str(table))  # the snapshot still has every file and the newest txn
    assert snapshot is not None and len(snapshot.files) == 5 and transaction_version(str(table), "tidemark:t") == 4
    assert len(output.live_files) == 5


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


def test_a_rollback_is_delta_s_restore_that_sets_the_transaction_back_and_keeps_other_writers_work(
    tmp_path: Path,
) -> None:
    """Batches 0-3 of one checkpoint (transaction base 0); the rollback to batch 1 is one RESTORE commit that also
    carries the pipeline's transaction at batch 1's version (a plain RESTORE leaves it at 3, and the re-run batches
    would be skipped as written). A compaction after the batches is undone with them; another writer's append after
    them refuses the rollback in one line, the table unchanged."""
    from tidemark.errors import CheckpointError
    from tidemark.sinks.delta.rollback import apply_table_rollback, plan_table_rollback

    def table(name: str) -> tuple[str, SinkTransaction]:
        path = tmp_path / name
        for batch in range(4):
            _append(path, batch + 1, "tidemark:t", batch)
        return str(path), SinkTransaction("tidemark:t", 0, str(path))

    path, transaction = table("compacted")
    at_batch_1 = len(DeltaTable(path, version=1).to_pyarrow_table())
    DeltaTable(path).optimize.compact()
    plan = plan_table_rollback(path, transaction, 1)
    assert [c.batch for c in plan.undone] == [2, 3] and plan.restore_version == 1 and plan.reset_to == 1
    assert plan.rows == 3 + 4
    apply_table_rollback(path, transaction, plan)
    after = DeltaTable(path)
    assert after.transaction_version("tidemark:t") == 1 and len(after.to_pyarrow_table()) == at_batch_1 == 1 + 2
    # Done already: the plan finds nothing to undo (a rollback run again after a kill finishes the checkpoint only).
    assert plan_table_rollback(path, transaction, 1).reset_to is None
    # The re-run batch 2 writes its version again: Delta takes it (the transaction is back at 1).
    _append(Path(path), 5, "tidemark:t", 2)
    assert DeltaTable(path).transaction_version("tidemark:t") == 2 and len(DeltaTable(path).to_pyarrow_table()) == 8

    path, transaction = table("shared")
    _append(Path(path), 2, "someone-else", 9, part="b")
    version = DeltaTable(path).version()
    with pytest.raises(
        CheckpointError, match=r"commit 4 of .* \(someone-else\) changed the table's data after batch 1"
    ):
        plan_table_rollback(path, transaction, 1)
    assert DeltaTable(path).version() == version
    # Their append before the undone batches is theirs to keep: RESTORE goes back to a version that holds it.
    path = str(tmp_path / "before")
    transaction = SinkTransaction("tidemark:t", 0, path)
    for batch in range(2):
        _append(Path(path), 1, "tidemark:t", batch)
    _append(Path(path), 2, "someone-else", 9, part="b")
    _append(Path(path), 1, "tidemark:t", 2)
    plan = plan_table_rollback(path, transaction, 1)
    assert plan.restore_version == 2 and [c.batch for c in plan.undone] == [2]
    apply_table_rollback(path, transaction, plan)
    rows = DeltaTable(path).to_pandas()
    assert sorted(rows["k"]) == ["a 00:15", "a 00:15", "b", "b"]
    assert DeltaTable(path).transaction_version("someone-else") == 9


def test_recover_takes_a_delta_table_of_any_partitioning_and_a_parquet_sink_only_by_window_folders(
    tmp_path: Path,
) -> None:
    """A Delta table says which windows it holds from its rows: unpartitioned, or partitioned by another column,
    it recovers; a Parquet sink is recovered by moving windowStart partitions aside, so without them it refuses in
    one line (the same for every other refusal of recover)."""
    from tidemark.errors import UsageError
    from tidemark.recovery.replay import check_replayable

    for partitions in ([], ["user"], ["windowStart"]):
        delta = write_config(tmp_path, sink={"format": "delta", "path": "output", "partition_by": partitions})
        check_replayable(PipelineContext.of(load_config(delta)))
    parquet = write_config(tmp_path, sink={"partition_by": []})
    with pytest.raises(UsageError, match=r"tidemark recover refused: a Parquet sink is recovered by moving its"):
        check_replayable(PipelineContext.of(load_config(parquet)))
    # An unpartitioned table tidemark wrote (delta-rs here): the windows come from its rows.
    import datetime as dt

    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    frame = pa.table(
        {
            "user": ["a", "b", "a"],
            "windowStart": pa.array([start, start, start + dt.timedelta(minutes=15)], pa.timestamp("us", "UTC")),
        }
    )
    write_deltalake(str(tmp_path / "output"), frame)
    held = sink_of(load_config(write_config(tmp_path, sink={"format": "delta", "path": "output"}))).held_windows()
    assert held.starts == (start, start + dt.timedelta(minutes=15)) and held.rows == 3
    assert "rows" in held.read_from and held.table_id == DeltaTable(str(tmp_path / "output")).metadata().id


def test_a_rollback_is_refused_by_the_append_only_property_not_by_the_feature_every_dv_table_lists(
    tmp_path: Path,
) -> None:
    """Delta lists the `appendOnly` writer feature on every table with named features (deletion vectors bring it);
    only the `delta.appendOnly` property forbids taking rows out."""
    from tidemark.errors import UsageError
    from tidemark.sinks.delta.rollback import plan_table_rollback

    path = tmp_path / "t"
    for batch in range(3):
        _append(path, 1, "tidemark:t", batch)
    features = ["appendOnly", "invariants"]
    _with_protocol(path, {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": features})
    transaction = SinkTransaction("tidemark:t", 0, str(path))
    plan = plan_table_rollback(str(path), transaction, 0)
    assert [c.batch for c in plan.undone] == [1, 2] and plan.reset_to == 0
    DeltaTable(str(path)).alter.set_table_properties({"delta.appendOnly": "true"})
    with pytest.raises(UsageError, match=r"is append-only \(delta.appendOnly\)"):
        plan_table_rollback(str(path), transaction, 0)


def test_recover_per_key_on_a_delta_sink_is_refused_before_the_table_is_read(tmp_path: Path) -> None:
    """`recover --per-key` rewrites windows some keys already have, which a table's files cannot take back: refused
    in one line before anything is read (here the table's folder holds a log no reader accepts: reading it would
    fail first)."""
    from tidemark.errors import UsageError
    from tidemark.recovery.plan import plan_recovery

    config = load_config(_delta_config(tmp_path))
    (tmp_path / "output" / "_delta_log").mkdir(parents=True)
    (tmp_path / "output" / "_delta_log" / f"{0:020d}.json").write_text("not json\n")
    with pytest.raises(UsageError, match="--per-key rewrites windows some keys already have"):
        plan_recovery(PipelineContext.of(config), None, per_key=True)
