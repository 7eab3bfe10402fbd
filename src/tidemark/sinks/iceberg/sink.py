"""The Apache Iceberg sink: each batch appended in one Iceberg snapshot whose summary carries tidemark's
transaction.

Why `foreachBatch` and not Spark's own `format("iceberg")` streaming sink: Iceberg's sink keys its snapshots on the
streaming query's id and epoch, which live in the checkpoint; a lost checkpoint loses them, and the restarted query
writes its windows again. Here every snapshot carries, through `snapshot-property.*` write options,
`tidemark.app` = the pipeline's own id (`tidemark:<pipeline name>`, it outlives any checkpoint) and
`tidemark.version` = `base + batch` (base: one past the newest version the table's lineage holds for that id when
this checkpoint first wrote, kept in the checkpoint by formats/sink_transaction.py). A batch Spark runs again after a
kill (its snapshot landed, its `commits/<n>` did not) finds its version among the current snapshot's ancestors and
is not appended again; a new checkpoint starts above every version the table has seen, and one that finds this
pipeline's output already in the table refuses to start rather than write it twice.

Why the check and the append do not race: tidemark's run lock keeps one query per pipeline (one writer of this app
id), and the check runs before that query's own append; another application's appends and compactions commit through
Iceberg's optimistic concurrency, which retries or fails a conflicting commit and never loses one. Iceberg retries an
append that lost its race rather than refusing it (Delta refuses a second commit of one transaction), so the lock is
all that keeps two runs from appending one batch: over Spark Connect, where the client holds the lock and a killed
client's batch in flight may still land on the server, it can be appended twice (docs/iceberg.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from tidemark.config import SinkFormat
from tidemark.errors import CheckpointError, InputError
from tidemark.sinks.base import (
    HeldWindows,
    Sink,
    SinkCheck,
    SinkInspection,
    SinkRollback,
    TableOutput,
    TableRollback,
    Tool,
    file_writers,
    require_jar_class,
)
from tidemark.sinks.iceberg.audit import audit_table, table_output
from tidemark.sinks.iceberg.catalog import (
    CATALOG,
    CATALOG_CLASS,
    CatalogTable,
    credentials,
    jdbc_access,
    reload_catalog,
    single_writer_warning,
    spark_settings,
)
from tidemark.sinks.iceberg.held import held_windows
from tidemark.sinks.iceberg.rollback import apply_table_rollback, plan_table_rollback
from tidemark.sinks.iceberg.table import (
    APP_KEY,
    BATCH_KEY,
    VERSION_KEY,
    has_metadata,
    newest_version,
    open_table,
    read_rows,
)
from tidemark.spark.artifacts import JarFeature

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from tidemark.findings import Finding
    from tidemark.formats import Checkpoint, SinkTransaction
    from tidemark.sinks.audit import SinkAudit
    from tidemark.storage import Backend, Location, Storage

log = logging.getLogger(__name__)
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


class IcebergSink(Sink):
    """Appends to an Iceberg table of a Hadoop or JDBC catalog, one snapshot per batch carrying tidemark's
    transaction."""

    format: ClassVar[SinkFormat] = SinkFormat.ICEBERG
    jar_groups: ClassVar[frozenset[JarFeature]] = frozenset({JarFeature.ICEBERG})
    vouched_by: ClassVar[frozenset[Tool]] = frozenset(Tool)
    lost_checkpoint_risk: ClassVar[str] = "write every window again"
    # A hand-written job's table is adopted in place: its snapshots carry no tidemark transaction (Spark's own
    # Iceberg sink keeps its query id), so tidemark's are told apart from them by their summaries.
    adopts_in_place: ClassVar[bool] = True
    readers: ClassVar[str] = "the table's readers"
    # Iceberg's commit that lost its race and kept losing it through its retries (commit.retry.num-retries, 4 by
    # default): a Hadoop catalog's "Version N already exists", a JDBC catalog's "metadata location ... has changed".
    # A race lost once is retried by Iceberg itself on the new metadata and succeeds, so this is no guard against two
    # runs appending one batch (docs/iceberg.md, "Two runs of one pipeline").
    concurrent_write_errors: ClassVar[tuple[str, ...]] = ("org.apache.iceberg.exceptions.CommitFailedException",)

    @classmethod
    def claims(cls, folder: Storage) -> bool:
        """True when the folder is an Iceberg table (its metadata folder holds a `*.metadata.json`), or is the
        metadata file a catalog names for one."""
        return has_metadata(folder)

    @classmethod
    def inspect_folder(
        cls, path: str, checkpoint: Storage, backend: Backend = "auto", spark: Any | None = None
    ) -> SinkInspection:
        """The table's snapshots, live files per partition and the newest batch of the checkpoint it holds."""
        del backend, spark
        from tidemark.sinks.iceberg.inspect import inspect_table

        return inspect_table(path, checkpoint)

    @property
    def table_name(self) -> str:
        """`[sink] table` in tidemark's Spark catalog: tidemark_iceberg.<namespace>.<table>."""
        return f"{CATALOG}.{self.config.sink.table}"

    @property
    def path(self) -> str | None:
        """The table's folder in the Hadoop catalog's warehouse: <warehouse>/<namespace>/<table>."""
        catalog, table = self.config.sink.catalog, self.config.sink.table
        return catalog.table_location(table) if catalog is not None and table is not None else None

    def spark_locations(self) -> tuple[str, ...]:
        """The catalog's warehouse, where Spark writes the table's files (Iceberg's HadoopFileIO reaches it through
        the session's Hadoop settings, which tidemark makes for it as for any location)."""
        catalog = self.config.sink.catalog
        return (catalog.warehouse,) if catalog is not None else ()

    def setup_warnings(self) -> tuple[Finding, ...]:
        """A Hadoop catalog whose warehouse is on an object store: safe for one writer only (catalog.py)."""
        catalog = self.config.sink.catalog
        found = single_writer_warning(catalog) if catalog is not None else None
        return (found,) if found is not None else ()

    def archive_location(self, checkpoint: Location) -> Location:
        """Beside the checkpoint, in a folder of its own: beside the table would be inside the catalog's namespace
        folder, whose folders are the catalog's (a Hadoop catalog reads each as a namespace or a table). Nothing of
        the table moves (it keeps its own history): the archive keeps a recovery's plan, marker and journals."""
        from tidemark.formats import ARCHIVE_DIR

        return checkpoint.parent.join(ARCHIVE_DIR).join(f"{checkpoint.name}-recovery")

    def _catalog_table(self) -> CatalogTable | None:
        """The table as a JDBC catalog names it (its database reached with the environment's credentials), None for
        a Hadoop catalog, whose tables are their folders."""
        catalog, table = self.config.sink.catalog, self.config.sink.table
        access = jdbc_access(catalog) if catalog is not None else None
        return CatalogTable(access, table) if access is not None and table is not None else None

    def _open(self) -> Any:
        """The table as pyiceberg reads it now, None when there is none yet."""
        return open_table(self._table_path(), self._catalog_table())

    def _table_path(self) -> str:
        path = self.path
        if path is None:
            msg = "the Iceberg sink needs [sink] table and [sink.catalog]"
            raise InputError(msg)
        return path

    @property
    def app_id(self) -> str:
        """The transaction id of every snapshot this pipeline makes, whatever its checkpoint."""
        return f"tidemark:{self.config.pipeline.name}"

    def spark_settings(self) -> Mapping[str, str]:
        """Iceberg's SQL extensions (its procedures) and the catalog of [sink.catalog]. Its table cache is off: a
        foreachBatch write goes through a cloned session, whose snapshots the query's own session would otherwise
        not see for 30 s."""
        catalog = self.config.sink.catalog
        prefix = f"spark.sql.catalog.{CATALOG}"
        settings = {"spark.sql.extensions": EXTENSIONS, prefix: CATALOG_CLASS, f"{prefix}.cache-enabled": "false"}
        if catalog is not None:
            settings.update(spark_settings(catalog))
        return settings

    def check(self) -> None:
        """Before any JVM, each in one line: a JDBC catalog's credentials missing from the environment; a rollback
        of the table that was interrupted (the table may already be rolled back, the checkpoint not), to finish
        first; a new checkpoint beside a table that holds this pipeline's output (a new query would write its
        windows again; with `[checkpoint] on_missing = "recover"` the run's failover recovers instead), or a table
        replaced since the checkpoint wrote to it. The query's own start checks the last two again (`configure`)."""
        from tidemark.formats import read_sink_rollback
        from tidemark.storage import open_storage

        catalog = self.config.sink.catalog
        if catalog is not None and catalog.uri is not None:
            credentials()  # a JDBC catalog's user and password: from the environment, or one line before any JVM
        undoing = read_sink_rollback(open_storage(self.config.checkpoint.location))
        if undoing is not None:
            msg = (
                f"a rollback of {self.config.checkpoint.location} to batch {undoing} was interrupted (the table may "
                f"already be rolled back, the checkpoint not): finish it with `tidemark recover CONFIG --to-batch "
                f"{undoing} --apply` before running"
            )
            raise InputError(msg)
        found = self._open()
        if self._kept_for_table(found) is None and self.config.checkpoint.on_missing == "fail":
            self._refuse_a_new_checkpoint(found)

    def writers(self, task_slots: int) -> int | None:
        """Files per output partition per batch: the same stage shape as a file sink's (sinks/base.py)."""
        return file_writers(self.config, task_slots)

    def transaction(self) -> SinkTransaction:
        """The checkpoint's sink transaction: kept from its first start, else chosen now above the table's own.
        Refused in one line, before anything is written: a table replaced since the checkpoint wrote to it, a new
        checkpoint on a table that holds this pipeline's output already."""
        return self._transaction(self._open())

    def _transaction(self, found: Any) -> SinkTransaction:
        from tidemark.formats import SinkTransaction, write_sink_transaction
        from tidemark.storage import open_storage

        kept = self._kept_for_table(found)
        table_id = str(found.metadata.table_uuid) if found is not None else None
        if kept is not None:
            if kept.table_id is None and table_id is not None:
                kept = SinkTransaction(kept.app_id, kept.base, kept.table, table_id)
                write_sink_transaction(open_storage(self.config.checkpoint.location), kept)
            return kept
        last = self._refuse_a_new_checkpoint(found)
        made = SinkTransaction(self.app_id, 0 if last is None else last + 1, self._table_path(), table_id)
        write_sink_transaction(open_storage(self.config.checkpoint.location), made)
        return made

    def _kept_for_table(self, found: Any) -> SinkTransaction | None:
        """The transaction the checkpoint keeps for this table, None when it keeps none for it; refused in one line
        when the table was replaced since the checkpoint wrote to it."""
        from tidemark.formats import read_sink_transaction
        from tidemark.storage import open_storage, parse_location

        kept = read_sink_transaction(open_storage(self.config.checkpoint.location))
        table = self._table_path()
        if kept is None or not parse_location(kept.table).same_place(parse_location(table)):
            return None
        table_id = str(found.metadata.table_uuid) if found is not None else None
        if kept.table_id is not None and table_id is not None and kept.table_id != table_id:
            msg = (
                f"the Iceberg table at {table} is not the one the checkpoint {self.config.checkpoint.location} "
                f"wrote to (table uuid {table_id}, the checkpoint's {kept.table_id}): it was replaced, and the "
                "windows the checkpoint committed are not in it. Run `tidemark recover CONFIG` to replay them "
                "into this table"
            )
            raise InputError(msg)
        return kept

    def _refuse_a_new_checkpoint(self, found: Any) -> int | None:
        """This pipeline's newest version in the table (None: none); refused in one line when the checkpoint has no
        batch, is no recovery's replay, and the table holds this pipeline's output already."""
        from tidemark.formats import Checkpoint, CheckpointStatus, read_recovery_marker
        from tidemark.storage import parse_location

        last = newest_version(found, self.app_id)
        if last is None:
            return None
        started = Checkpoint.open(self.config.checkpoint.location).status() is CheckpointStatus.PRESENT
        # A recovery's replay (the checkpoint carries its marker) writes only windows the table does not hold.
        replay = read_recovery_marker(parse_location(self.config.checkpoint.location)) is not None
        if not started and not replay:
            msg = (
                f"the checkpoint {self.config.checkpoint.location} has no batch but the Iceberg table "
                f"{self._table_path()} already holds this pipeline's output ({APP_KEY} {self.app_id}, version "
                f"{last}): a new query would write its windows again. Run `tidemark recover CONFIG` (then --apply) "
                "to replay only the windows it lacks, restore the checkpoint, or name a new table"
            )
            raise InputError(msg)
        return last

    def holds_output(self) -> bool:
        """True when the table's lineage has a snapshot carrying this pipeline's transaction."""
        return newest_version(self._open(), self.app_id) is not None

    def held_windows(self) -> HeldWindows:
        """The window starts the table holds: its live files' partition values or its rows (iceberg/held.py)."""
        return held_windows(self._table_path(), catalog=self._catalog_table())

    def table_rows(self, columns: list[str]) -> Any:
        """The table's rows projected on columns, position deletes applied (pyiceberg)."""
        table = self._open()
        if table is None:
            import pyarrow as pa

            return pa.table({c: pa.array([]) for c in columns})
        return read_rows(table, columns)

    def table_output(self, checkpoint: Storage) -> TableOutput:
        """The checkpoint's batches as the table's lineage holds them: snapshots carrying its transaction."""
        from tidemark.formats import read_sink_transaction

        return table_output(self._table_path(), read_sink_transaction(checkpoint), self._catalog_table())

    def audit(self, checkpoint: Checkpoint, inputs: Mapping[int, tuple[str, ...]]) -> SinkAudit:
        """Each committed batch's snapshot, read from the table's lineage (sinks/iceberg/audit.py)."""
        return audit_table(checkpoint, self.table_output(checkpoint.store), inputs)

    def plan_rollback(self, checkpoint: Checkpoint, to_batch: int) -> SinkRollback:
        """The table's own undo: Iceberg's rollback_to_snapshot (sinks/iceberg/rollback.py); no file moves."""
        transaction = self._kept_transaction(checkpoint.store)
        undo = plan_table_rollback(self._table_path(), transaction, to_batch, self._catalog_table())
        return SinkRollback(to_batch, undo=undo, notes=undo.notes)

    def apply_rollback(self, checkpoint: Storage, plan: SinkRollback) -> None:
        """The table's rollback_to_snapshot (the caller marked the checkpoint first)."""
        del checkpoint
        if plan.undo is not None and plan.undo.reset_to is not None:
            self.apply_table_rollback(plan.undo)

    def apply_table_rollback(self, undo: TableRollback) -> None:
        """The rollback_to_snapshot call, in a session with Iceberg's jar and this catalog (started for it and
        stopped after, or the running one)."""
        from pyspark.sql import SparkSession

        from tidemark.spark.environment import SessionNeeds, spark_session

        running = SparkSession.getActiveSession()
        needs = SessionNeeds(
            master=self.config.spark.master,
            app_name=f"tidemark-rollback-{self.config.pipeline.name}",
            settings=dict(self.spark_settings()),
            locations=(self._table_path(),),
            jars=self.jar_groups,
        )
        with spark_session(needs, running) as spark:
            reload_catalog(spark)  # a running session may hold another [sink.catalog] under the same name
            try:
                apply_table_rollback(spark, self.table_name, self._table_path(), undo, self._catalog_table())
            finally:
                if running is None:
                    spark.stop()

    def _kept_transaction(self, checkpoint: Storage) -> SinkTransaction:
        from tidemark.formats import read_sink_transaction

        transaction = read_sink_transaction(checkpoint)
        if transaction is None:
            msg = (
                f"{checkpoint.uri('')} keeps no Iceberg transaction (tidemark did not write this table from it): its "
                "batches' snapshots cannot be told apart from other writers', so they cannot be rolled back"
            )
            raise CheckpointError(msg)
        return transaction

    def check_rows(self, keys: tuple[str, ...], spark: SparkSession | None) -> SinkCheck | None:
        """Rows and repeated keys as pyiceberg reads the table (position deletes applied)."""
        del spark
        from tidemark.sinks.audit import repeated_keys

        table = self._open()
        if table is None:
            return None
        rows, repeated, _ = repeated_keys(read_rows(table, list(keys)), keys)
        return SinkCheck(rows, repeated, "pyiceberg")

    def create_table(self, output: DataFrame) -> None:
        """The table, created empty when the catalog lacks it: the output's columns, partitioned by the config's
        partitions, format version 2. An existing table keeps its own spec (another one, or none, is accepted). The
        session's catalog is loaded afresh first: it may hold another pipeline's [sink.catalog] (catalog.py)."""
        spark = output.sparkSession
        reload_catalog(spark)
        namespace = self.table_name.rsplit(".", 1)[0]
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in output.schema.fields)
        partitions = ", ".join(f"`{p}`" for p in self.config.partition_by)
        try:
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
            spark.sql(
                f"CREATE TABLE IF NOT EXISTS {self.table_name} ({columns}) USING iceberg"
                + (f" PARTITIONED BY ({partitions})" if partitions else "")
                + " TBLPROPERTIES ('format-version' = '2')"
            )
        except Exception as exc:
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
            msg = f"[sink] table {self.config.sink.table}: the Iceberg catalog could not create it: {first[:300]}"
            raise InputError(msg) from exc

    def configure(self, writer: DataStreamWriter, output: DataFrame) -> DataStreamWriter:
        """A foreachBatch writer appending each batch with the transaction (app id, base + batch) in its snapshot's
        summary."""
        require_jar_class(output.sparkSession, CATALOG_CLASS, "Apache Iceberg jar")
        self.create_table(output)
        transaction = self._transaction(self._open())
        name, catalog = self.table_name, self._catalog_table()
        path = self._table_path()
        first = [True]

        def write_batch(frame: DataFrame, batch: int) -> None:
            version = transaction.version_of(batch)
            if first[0]:  # only a query's first batch can be one whose snapshot landed before a kill
                first[0] = False
                last = newest_version(open_table(path, catalog), transaction.app_id)
                if last is not None and last >= version:
                    log.info("batch %d: its Iceberg snapshot (version %d of %s) is in the table", batch, version, name)
                    # Nothing is appended, but the batch runs (Spark's no-op sink) so that its state commits.
                    frame.write.format("noop").mode("append").save()
                    return
            (
                frame.writeTo(name)
                .option(f"snapshot-property.{APP_KEY}", transaction.app_id)
                .option(f"snapshot-property.{VERSION_KEY}", str(version))
                .option(f"snapshot-property.{BATCH_KEY}", str(batch))
                .append()
            )

        return writer.foreachBatch(write_batch)
