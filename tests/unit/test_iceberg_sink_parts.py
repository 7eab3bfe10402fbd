"""The Iceberg sink's parts that need no JVM: the table reader, held windows, audit and inspect (checked on tables
pyiceberg itself wrote, laid out as a Hadoop catalog keeps them), the [sink.catalog] config, what an Iceberg config
asks of Spark, and the jar pins per Spark line."""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from tests.helpers import write_config
from tidemark.compat import UTC
from tidemark.config import load_config
from tidemark.errors import CheckpointError, ConfigError, EnvironmentProblem, InputError, UsageError
from tidemark.formats import SinkTransaction
from tidemark.needs import needs_of
from tidemark.sinks import IcebergSink, SinkLimits, SinkRollback, TableRollback, Tool, reader_of, sink_of
from tidemark.sinks.iceberg.audit import audit_table, table_output
from tidemark.sinks.iceberg.held import held_windows
from tidemark.sinks.iceberg.inspect import inspect_table
from tidemark.sinks.iceberg.rollback import plan_table_rollback
from tidemark.sinks.iceberg.table import lineage, newest_version, open_table, require_readable
from tidemark.spark import jars
from tidemark.spark.artifacts import ICEBERG_JARS, JarFeature, coordinates
from tidemark.storage import open_storage

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = timedelta(minutes=15)
SCHEMA = Schema(
    NestedField(1, "user", StringType(), required=False),
    NestedField(2, "windowStart", TimestamptzType(), required=False),
    NestedField(3, "count", LongType(), required=False),
)
ARROW = pa.schema([("user", pa.string()), ("windowStart", pa.timestamp("us", tz="UTC")), ("count", pa.int64())])


class _Table:
    """An Iceberg table pyiceberg writes (SQL catalog on SQLite), mirrored after each commit into the Hadoop
    catalog's layout (metadata/v<N>.metadata.json and version-hint.text) that the sink reads."""

    def __init__(self, root: Path, partitioned: bool = True) -> None:
        root.mkdir(parents=True, exist_ok=True)
        catalog = SqlCatalog("c", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
        catalog.create_namespace("lake")
        self.path = root / "warehouse" / "lake" / "clicks"
        spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "windowStart")) if partitioned else None
        self.table = catalog.create_table(
            "lake.clicks", SCHEMA, location=f"file://{self.path}", partition_spec=spec or PartitionSpec()
        )
        self.version = 0
        self._mirror()

    def _mirror(self) -> None:
        self.table.refresh()
        self.version += 1
        source = self.table.metadata_location.removeprefix("file://")
        shutil.copyfile(source, self.path / "metadata" / f"v{self.version}.metadata.json")
        (self.path / "metadata" / "version-hint.text").write_text(str(self.version))

    def append(self, windows: list[int], users: str = "ab", props: dict[str, str] | None = None) -> None:
        rows = [(u, T0 + w * WINDOW, 1) for w in windows for u in users]
        frame = pa.table(
            {"user": [r[0] for r in rows], "windowStart": [r[1] for r in rows], "count": [r[2] for r in rows]},
            schema=ARROW,
        )
        self.table.append(frame, snapshot_properties=props or {})
        self._mirror()

    def ours(self, version: int, windows: list[int]) -> None:
        self.append(windows, props={"tidemark.app": "tidemark:t", "tidemark.version": str(version)})

    def delete_window(self, window: int) -> None:
        from pyiceberg.expressions import EqualTo

        self.table.delete(EqualTo("windowStart", (T0 + window * WINDOW).isoformat()))
        self._mirror()


class _Checkpoint:
    """What audit asks of a checkpoint: its committed batches (none of them Spark's offline repartition)."""

    def __init__(self, batches: list[int]) -> None:
        self.batches = batches

    def commit_batches(self) -> list[int]:
        return self.batches

    def repartition_batches(self, batches: list[int]) -> dict[int, Any]:
        del batches
        return {}


def test_held_windows_come_from_partition_values_and_from_rows_with_deletes_applied(tmp_path: Path) -> None:
    table = _Table(tmp_path / "p")
    assert held_windows(str(table.path)).starts == ()  # created, no snapshot: holds none
    table.ours(0, [0, 1])
    table.ours(1, [2])
    held = held_windows(str(table.path))
    assert held.starts == (T0, T0 + WINDOW, T0 + 2 * WINDOW) and held.rows == 6
    assert "partition values of 3 live data file(s)" in held.read_from
    assert held.table_id == str(table.table.metadata.table_uuid)
    assert all(not f.startswith("/") and f.endswith(".parquet") for f in held.files), held.files

    flat = _Table(tmp_path / "u", partitioned=False)
    flat.ours(0, [0, 1, 3])
    flat.delete_window(3)  # the newest window's rows deleted: it is no longer held
    held = held_windows(str(flat.path))
    assert held.starts == (T0, T0 + WINDOW) and held.rows == 4
    assert "windowStart of the table's rows" in held.read_from
    assert held_windows(str(tmp_path / "none")).starts == ()  # no table yet


def test_the_newest_metadata_file_is_read_past_a_hint_a_kill_left_behind(tmp_path: Path) -> None:
    # A Hadoop catalog's commit renames v<N+1>.metadata.json into place, then writes version-hint.text: a driver
    # killed between the two leaves batch 1's snapshot committed (Iceberg reads past the hint) and the hint at v<N>.
    table = _Table(tmp_path)
    table.ours(0, [0])
    table.ours(1, [1])
    hint = table.path / "metadata" / "version-hint.text"
    hint.write_text(str(table.version - 1))
    # A commit killed before its rename leaves a temporary metadata file, which is no version.
    shutil.copyfile(table.path / "metadata" / "v1.metadata.json", table.path / "metadata" / "0a1b-c2.metadata.json")
    found = open_table(str(table.path))
    assert found is not None and found.metadata_location.endswith(f"/v{table.version}.metadata.json")
    # What the sink checks before a replayed batch's append: batch 1 is in the table (read at the hint: batch 0).
    assert newest_version(found, "tidemark:t") == 1
    hint.write_text("0")  # a hint naming no file: the highest v<N>
    found = open_table(str(table.path))
    assert found is not None and newest_version(found, "tidemark:t") == 1
    hint.unlink()  # killed while Iceberg swapped the hint (it deletes the old one, then renames the new one in)
    found = open_table(str(table.path))
    assert found is not None and newest_version(found, "tidemark:t") == 1


def test_lineage_keeps_tidemark_s_keys_and_audit_tells_other_writers_and_a_batch_written_twice(
    tmp_path: Path,
) -> None:
    table = _Table(tmp_path)
    table.ours(0, [0])
    table.append([1], users="x", props={"tidemark.app": "someone-else", "tidemark.version": "0"})
    table.ours(1, [1])
    table.ours(1, [2])  # batch 1's version a second time
    commits = lineage(table.table)
    assert [(c.app_id, c.version, c.operation) for c in commits] == [
        ("tidemark:t", 0, "append"),
        ("someone-else", 0, "append"),
        ("tidemark:t", 1, "append"),
        ("tidemark:t", 1, "append"),
    ]
    transaction = SinkTransaction("tidemark:t", 0, str(table.path))
    output = table_output(str(table.path), transaction)
    assert [(c.batch, c.rows, len(c.files)) for c in output.commits] == [(0, 2, 1), (1, 2, 1), (1, 2, 1)]
    assert (output.other_commits, output.other_writers) == (1, ("someone-else",))
    audit = audit_table(_Checkpoint([0, 1, 2]), output, {})  # type: ignore[arg-type]
    kinds = {v.kind.value: v.batches for v in audit.violations}
    assert kinds == {"batch-written-twice": (1,), "batch-without-sink-entry": (2,)}
    assert audit.data_files == 4 and any("1 snapshot(s) by other writers (someone-else)" in n for n in audit.notes)
    # A later checkpoint (base 2) counts the earlier ones' snapshots apart, never as its batches.
    later = table_output(str(table.path), SinkTransaction("tidemark:t", 2, str(table.path)))
    assert later.commits == () and any("earlier checkpoints" in n for n in later.notes)
    clean = audit_table(_Checkpoint([0]), table_output(str(table.path), transaction), {})  # type: ignore[arg-type]
    assert [v.kind.value for v in clean.violations] == ["batch-written-twice"]  # batch 1 is not committed there


def test_inspect_reports_snapshots_and_files_and_names_the_procedure_for_each_finding(tmp_path: Path) -> None:
    table = _Table(tmp_path)
    table.ours(0, [0, 1])
    table.ours(1, [1])
    checkpoint = open_storage(str(tmp_path / "checkpoint"))
    from tidemark.formats import write_sink_transaction

    write_sink_transaction(checkpoint, SinkTransaction("tidemark:t", 0, str(table.path)))
    report = inspect_table(str(table.path), checkpoint)
    assert (report.snapshots, report.files, report.rows, report.last_batch) == (2, 3, 6, 1)
    assert sorted(report.files_per_partition.values()) == [1, 2]
    low = SinkLimits(1, 1, max_table_files=2, small_file_bytes=1 << 30)
    codes = {f.code: f.fix for f in report.findings(low)}
    assert set(codes) == {"ICEBERG_SMALL_FILES", "ICEBERG_UNEXPIRED_SNAPSHOTS"}
    assert "rewrite_data_files" in codes["ICEBERG_SMALL_FILES"]
    assert "expire_snapshots" in codes["ICEBERG_UNEXPIRED_SNAPSHOTS"]
    assert report.findings(SinkLimits(1, 1, max_table_files=1000, small_file_bytes=1 << 30)) == []
    assert reader_of(open_storage(str(table.path))) is IcebergSink  # its metadata claims the folder
    with pytest.raises(CheckpointError, match="is not an Iceberg table"):
        inspect_table(str(tmp_path / "nothing"), checkpoint)


def test_inspect_reads_a_catalog_s_table_from_the_metadata_file_it_names_and_refuses_a_folder_that_cannot_say(
    tmp_path: Path,
) -> None:
    from tidemark.formats import write_sink_transaction

    # A SQL catalog's table (the layout a JDBC catalog writes: <NNNNN>-<uuid>.metadata.json, no version hint) at a
    # location of its own, outside the catalog's warehouse.
    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("lake")
    folder = tmp_path / "elsewhere" / "clicks"
    table = catalog.create_table("lake.clicks", SCHEMA, location=f"file://{folder}")
    for version, users in enumerate(["ab", "abc"]):
        rows = pa.table({"user": list(users), "windowStart": [T0] * len(users), "count": [1] * len(users)}, ARROW)
        table.append(rows, snapshot_properties={"tidemark.app": "tidemark:t", "tidemark.version": str(version)})
    checkpoint = open_storage(str(tmp_path / "checkpoint"))
    write_sink_transaction(checkpoint, SinkTransaction("tidemark:t", 0, str(folder)))
    assert not (folder / "metadata" / "version-hint.text").exists()
    with pytest.raises(CheckpointError, match=r"has no version-hint\.text: its current metadata file is") as caught:
        inspect_table(str(folder), checkpoint)
    assert "\n" not in str(caught.value) and "give that metadata file" in str(caught.value)
    assert reader_of(open_storage(table.metadata_location)) is IcebergSink  # a metadata file is claimed too
    report = inspect_table(table.metadata_location, checkpoint)
    assert (report.snapshots, report.files, report.rows, report.last_batch) == (2, 2, 5, 1)
    assert report.location == f"file://{folder}" and report.metadata_file == table.metadata_location
    with pytest.raises(CheckpointError, match="not an Iceberg table \\(no such metadata file\\)"):
        inspect_table(str(folder / "metadata" / "99999-gone.metadata.json"), checkpoint)

    # A Hadoop catalog's table folder copied elsewhere: its metadata still names the original's location and files.
    hadoop = _Table(tmp_path / "h")
    hadoop.ours(0, [0])
    copy = tmp_path / "copy" / "clicks"
    shutil.copytree(hadoop.path, copy)
    assert inspect_table(str(hadoop.path), checkpoint).files == 1
    with pytest.raises(CheckpointError, match=f"says its location is file://{hadoop.path} \\(copied") as caught:
        inspect_table(str(copy), checkpoint)
    assert "\n" not in str(caught.value)


def test_equality_deletes_are_refused_in_one_line() -> None:
    files = pa.table({"content": pa.array([0, 2], pa.int8()), "file_path": ["a.parquet", "d.parquet"]})
    with pytest.raises(CheckpointError, match="equality delete files") as caught:
        require_readable("/w/lake/t", files, "audit it")
    assert "\n" not in str(caught.value)
    require_readable("/w/lake/t", files.slice(0, 1), "audit it")  # data files only: readable


def _config(tmp_path: Path, **catalog: Any) -> Path:
    sink = {"format": "iceberg", "path": None, "table": "lake.clicks", "catalog": {"warehouse": "wh", **catalog}}
    return write_config(tmp_path, sink=sink)


_JDBC = {"type": "jdbc", "warehouse": "wh", "uri": "jdbc:mariadb://127.0.0.1:3306/iceberg"}


def _jdbc_sink(uri: str) -> dict[str, Any]:
    return {"format": "iceberg", "path": None, "table": "a.b", "catalog": {**_JDBC, "uri": uri}}


def test_a_jdbc_catalog_takes_its_credentials_from_the_environment_only_and_never_shows_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tidemark.cli.main import main

    config_file = _config(tmp_path, type="jdbc", uri="jdbc:mariadb://127.0.0.1:3306/iceberg")
    config = load_config(config_file)
    sink = sink_of(config)
    monkeypatch.delenv("ICEBERG_JDBC_USER", raising=False)
    monkeypatch.setenv("ICEBERG_JDBC_PASSWORD", "s3cr3t-pw")
    with pytest.raises(UsageError, match="set ICEBERG_JDBC_USER \\(they are never read") as caught:
        sink.check()  # before any JVM
    assert "\n" not in str(caught.value) and "s3cr3t-pw" not in str(caught.value)
    (tmp_path / "landing").mkdir()
    assert main(["run", str(config_file), "--available-now"]) == 2  # exit 2, one line, before any JVM
    shown = capsys.readouterr()
    err = [line for line in shown.err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "set ICEBERG_JDBC_USER (" in err[0], err
    assert "s3cr3t-pw" not in shown.err + shown.out
    monkeypatch.setenv("ICEBERG_JDBC_USER", "ice")
    settings = needs_of(config).settings
    prefix = "spark.sql.catalog.tidemark_iceberg"
    assert {k: v for k, v in settings.items() if k.startswith(prefix + ".")} == {
        f"{prefix}.type": "jdbc",
        f"{prefix}.warehouse": str(tmp_path.resolve() / "wh"),
        f"{prefix}.uri": "jdbc:mariadb://127.0.0.1:3306/iceberg",
        f"{prefix}.jdbc.user": "ice",
        f"{prefix}.jdbc.password": "s3cr3t-pw",
        f"{prefix}.jdbc.schema-version": "V1",
        f"{prefix}.cache-enabled": "false",
    }
    # pyiceberg reads the same catalog (its name: the Spark catalog's) through SQLAlchemy and PyMySQL; a server that
    # does not answer is one line naming the place, never the password.
    with pytest.raises(CheckpointError, match=r"through the JDBC catalog at 127\.0\.0\.1:1/iceberg") as refused:
        sink_of(load_config(_config(tmp_path, type="jdbc", uri="jdbc:mariadb://127.0.0.1:1/iceberg"))).held_windows()
    assert "s3cr3t-pw" not in str(refused.value) and "\n" not in str(refused.value)


def test_the_catalog_config_resolves_its_warehouse_and_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path))
    sink = sink_of(config)
    assert isinstance(sink, IcebergSink)
    assert sink.path == str(tmp_path.resolve() / "wh" / "lake" / "clicks")  # relative to the config file's folder
    bad = [
        ({"format": "iceberg", "path": "out", "table": "lake.t", "catalog": {"warehouse": "w"}}, "not sink.path"),
        ({"format": "iceberg", "path": None, "table": "t", "catalog": {"warehouse": "w"}}, "namespace.table"),
        ({"format": "iceberg", "path": None, "table": "lake.t"}, r"\[sink.catalog\]"),
        ({"format": "delta", "path": "out", "catalog": {"warehouse": "w"}}, "for format 'iceberg'"),
        ({"format": "iceberg", "path": None, "table": "a.b", "catalog": {"type": "glue", "warehouse": "w"}}, "type"),
        ({"format": "iceberg", "path": None, "table": "a.b", "catalog": {"type": "jdbc", "warehouse": "w"}}, "uri"),
        (_jdbc_sink("jdbc:postgresql://h/db"), "jdbc:mariadb://host:port/database"),
        (_jdbc_sink("jdbc:mariadb://u:pw@h:3306/db"), "ICEBERG_JDBC_USER / ICEBERG_JDBC_PASSWORD"),
        (_jdbc_sink("jdbc:mariadb://h:3306/db?password=pw"), "takes no user, password or driver options"),
        ({"format": "iceberg", "path": None, "table": "a.b", "catalog": {**_JDBC, "type": "hadoop"}}, "drop it"),
    ]
    for number, (table, words) in enumerate(bad):
        folder = tmp_path / str(number)
        folder.mkdir()
        with pytest.raises(ConfigError, match=words) as caught:
            load_config(write_config(folder, sink=table))
        assert "\n" not in str(caught.value)


def test_an_iceberg_config_asks_spark_for_its_catalog_and_vouches_for_every_tool(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path))
    needs = needs_of(config)
    assert JarFeature.ICEBERG in needs.jar_groups
    settings = needs.settings
    warehouse = str(tmp_path.resolve() / "wh")
    assert settings["spark.sql.catalog.tidemark_iceberg"] == "org.apache.iceberg.spark.SparkCatalog"
    assert settings["spark.sql.catalog.tidemark_iceberg.type"] == "hadoop"
    assert settings["spark.sql.catalog.tidemark_iceberg.warehouse"] == warehouse
    # A foreachBatch write is made through a cloned session: without this its snapshots stay unseen for 30 s.
    assert settings["spark.sql.catalog.tidemark_iceberg.cache-enabled"] == "false"
    assert "IcebergSparkSessionExtensions" in settings["spark.sql.extensions"]
    sink = sink_of(config)
    assert sink.vouched_by == frozenset(Tool)
    for tool in Tool:
        sink.refuse(tool)  # none refuses
    # adopt writes into a hand-written job's own table (its snapshots carry no tidemark transaction).
    assert sink.adopts_in_place
    assert not sink.holds_output()  # no table yet


def test_recovery_s_archive_is_beside_the_checkpoint_not_in_the_catalog_s_namespace_folder(tmp_path: Path) -> None:
    from tidemark.context import PipelineContext

    locations = PipelineContext.of(load_config(_config(tmp_path))).locations(Tool.RECOVER)
    root = tmp_path.resolve()
    assert locations.sink.key == str(root / "wh" / "lake" / "clicks")
    assert locations.archive_base.key == str(root / ".tidemark-archive" / "checkpoint-recovery")
    # Its own folder, not the one whose top-level journals `state repartition` keeps for the checkpoint's swaps.
    assert locations.archive_base.relative_to(locations.sink.parent) is None


def test_iceberg_jars_are_locked_per_line_and_a_line_without_iceberg_is_one_line() -> None:
    lock = jars.packaged_lock()
    for line, wanted in ICEBERG_JARS.items():
        locked = lock[f"iceberg@spark-{line}"]
        assert [j.coordinate for j in locked] == list(wanted)  # exactly these jars, no closure
        runtime, driver = locked
        assert re.fullmatch(r"[0-9a-f]{64}", runtime.sha256) and runtime.size > 40_000_000  # self-contained
        # MariaDB's JDBC driver for a JDBC catalog: Maven Central's own .sha256 of the jar.
        assert (driver.coordinate, driver.size) == ("org.mariadb.jdbc:mariadb-java-client:3.5.7", 763_697)
        assert driver.sha256 == "07bb1229dc184f3313a5aef4c5a6b3207c8dbaa09db4a26814c936f004b4c526"
    driver = "org.mariadb.jdbc:mariadb-java-client:3.5.7"
    assert coordinates(JarFeature.ICEBERG, "4.1.1") == [
        "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0",
        driver,
    ]
    assert coordinates(JarFeature.ICEBERG, "3.5.7") == [
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0",
        driver,
    ]
    for version in ("4.2.0", "4.3.0"):
        lines = r"Spark 3\.5, Spark 4\.0, Spark 4\.1$"
        words = rf"Apache Iceberg has no release for Spark {version[:3]}: the Iceberg sink runs on {lines}"
        with pytest.raises(EnvironmentProblem, match=words):
            coordinates(JarFeature.ICEBERG, version)
        with pytest.raises(EnvironmentProblem, match=rf"no release for Spark {version[:3]}"):
            jars.fetch([JarFeature.ICEBERG], version, offline=True)
    assert jars.lock_key(JarFeature.ICEBERG, "4.1.3") == "iceberg@spark-4.1"
    assert JarFeature.ICEBERG in jars.EXACT_PINS and JarFeature.DELTA in jars.EXACT_PINS


def test_a_rollback_plan_goes_back_to_the_snapshot_before_the_first_undone_batch_unless_another_writer_follows(
    tmp_path: Path,
) -> None:
    table = _Table(tmp_path)
    for version, window in enumerate([0, 1, 2, 3]):
        table.ours(version, [window])
    transaction = SinkTransaction("tidemark:t", 0, str(table.path))
    ids = [c.snapshot_id for c in lineage(table.table)]
    plan = plan_table_rollback(str(table.path), transaction, 1)
    assert [c.batch for c in plan.undone] == [2, 3] and plan.restore_version == ids[1] and plan.reset_to == 1
    assert plan.rows == 4 and len(plan.files) == 2 and "rollback_to_snapshot" in plan.notes[0]
    assert plan_table_rollback(str(table.path), transaction, 3).reset_to is None  # nothing after batch 3
    # The plan's line is the undo's own: rollback_to_snapshot makes no new snapshot (Delta's RESTORE makes one).
    line = SinkRollback(1, undo=plan).describe()
    assert line == (
        f"table {table.path}: 2 commit(s) of batches after 1 taken out of its lineage by rollback_to_snapshot "
        f"{ids[1]} (no new snapshot) (2 file(s), 4 rows, kept for time travel)"
    )
    assert "one commit" not in line
    delta_like = TableRollback("t", 1, plan.undone, 1, restore_version=1)
    assert SinkRollback(1, undo=delta_like).describe() == (
        "table t: 2 commit(s) of batches after 1 undone by one commit (2 file(s), 4 rows, kept for time travel)"
    )
    assert SinkRollback(1).describe() is None
    table.append([9], users="z", props={"tidemark.app": "someone-else"})  # another application's append
    with pytest.raises(UsageError, match="would drop it") as caught:
        plan_table_rollback(str(table.path), transaction, 1)
    assert "someone-else" in str(caught.value) and "\n" not in str(caught.value)


def test_a_run_refuses_while_a_rollback_of_its_table_is_unfinished(tmp_path: Path) -> None:
    from tidemark.formats import clear_sink_rollback, mark_sink_rollback

    sink = sink_of(load_config(_config(tmp_path)))
    checkpoint = open_storage(str(tmp_path / "checkpoint"))
    sink.check()  # no rollback under way
    mark_sink_rollback(checkpoint, 2)
    with pytest.raises(InputError, match="--to-batch 2 --apply"):
        sink.check()
    clear_sink_rollback(checkpoint)
    sink.check()


def test_a_new_checkpoint_beside_a_table_holding_the_pipeline_s_output_is_refused_before_any_jvm(
    tmp_path: Path,
) -> None:
    from tidemark.formats import write_sink_transaction

    table = _Table(tmp_path)
    sink = sink_of(load_config(_config(tmp_path, warehouse="warehouse")))
    assert sink.path == str(table.path)
    table.append([0], props={"tidemark.app": "someone-else", "tidemark.version": "7"})
    sink.check()  # another application's output only: a new checkpoint is fine
    table.ours(3, [1])
    with pytest.raises(InputError, match=r"has no batch but the Iceberg table .* tidemark:t, version 3\)") as caught:
        sink.check()
    assert "\n" not in str(caught.value)
    # With the automatic recovery on, the run is let through: its failover recovers instead (recovery/auto.py).
    auto = {"format": "iceberg", "path": None, "table": "lake.clicks", "catalog": {"warehouse": "warehouse"}}
    on_missing = {"location": "checkpoint", "on_missing": "recover"}
    sink_of(load_config(write_config(tmp_path, sink=auto, checkpoint=on_missing))).check()
    # The checkpoint keeps its transaction for this table (a first start that wrote no batch yet): it may start.
    checkpoint = open_storage(str(tmp_path / "checkpoint"))
    uuid = str(table.table.metadata.table_uuid)
    write_sink_transaction(checkpoint, SinkTransaction("tidemark:t", 4, str(table.path), uuid))
    sink.check()
    write_sink_transaction(checkpoint, SinkTransaction("tidemark:t", 4, str(table.path), "another-uuid"))
    with pytest.raises(InputError, match="it was replaced"):
        sink.check()


def test_a_warehouse_on_a_store_reaches_the_session_and_a_hadoop_catalog_there_warns_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tidemark.sinks.iceberg.fileio import StoreFileIO

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    # The checkpoint is local: only the sink names the store, and the session gets its connector and credentials.
    needs = needs_of(load_config(_config(tmp_path, warehouse="s3a://lake/wh")))
    assert "s3a://lake/wh" in needs.locations and JarFeature.AWS in needs.jar_groups
    assert JarFeature.AZURE not in needs.jar_groups
    hadoop = sink_of(load_config(_config(tmp_path, warehouse="s3a://lake/wh")))
    [warning] = hadoop.setup_warnings()
    assert warning.code == "ICEBERG_HADOOP_CATALOG_ON_OBJECT_STORE" and "s3a://lake/wh" in warning.message
    assert not sink_of(load_config(_config(tmp_path))).setup_warnings()  # a local warehouse renames atomically
    monkeypatch.setenv("ICEBERG_JDBC_USER", "ice")
    monkeypatch.setenv("ICEBERG_JDBC_PASSWORD", "pw")
    jdbc = _config(tmp_path, warehouse="s3a://lake/wh", type="jdbc", uri="jdbc:mariadb://127.0.0.1:3306/iceberg")
    assert not sink_of(load_config(jdbc)).setup_warnings()  # its database commits, not a rename
    # pyiceberg reads local files with its own pyarrow FileIO (object stores: tests/storage/test_iceberg_on_stores.py).
    assert StoreFileIO()._object_store(str(tmp_path / "v1.metadata.json")) is None
