"""The Delta Lake sink: each batch appended in one Delta commit that carries tidemark's transaction id.

Why `foreachBatch` with Delta's idempotent writes and not Spark's own `format("delta")` sink: Spark's Delta sink
names its commits by the query id, which lives in the checkpoint; a lost checkpoint loses it, and the restarted
query's batches 0, 1, ... are new to the table. Here every commit carries `txnAppId` = the pipeline's own id
(`tidemark:<pipeline name>`, it outlives any checkpoint) and `txnVersion` = `base + batch` (base: one past the
newest version the table holds for that id when this checkpoint first wrote, kept in the checkpoint by
formats/sink_transaction.py). A batch Spark runs again after a kill (its Delta commit landed, its `commits/<n>`
did not) repeats its version and Delta skips it; a new checkpoint starts above every version the table has seen,
and one that finds this pipeline's output already in the table refuses to start rather than write it twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from tidemark.config import SinkFormat, local_threads
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
from tidemark.sinks.delta.held import held_windows
from tidemark.sinks.delta.log import has_log
from tidemark.sinks.delta.output import table_output
from tidemark.sinks.delta.protocol import require_supported
from tidemark.sinks.delta.rollback import apply_table_rollback, plan_table_rollback
from tidemark.sinks.delta.table import open_table, protocol_of, read_rows, transaction_version
from tidemark.sinks.table_audit import audit_commits
from tidemark.spark.artifacts import JarFeature

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from tidemark.config import TidemarkConfig
    from tidemark.formats import Checkpoint, SinkTransaction
    from tidemark.sinks.audit import SinkAudit
    from tidemark.storage import Backend, Storage

log = logging.getLogger(__name__)
EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
# Static settings: a session started by tidemark has them; a running (notebook) session without them still writes
# path-based Delta tables once this check is off (not: DESCRIBE HISTORY, SQL on delta.`path`, catalog tables).
SETTINGS = {
    "spark.sql.extensions": EXTENSION,
    "spark.sql.catalog.spark_catalog": CATALOG,
    "spark.databricks.delta.requiredSparkConfsCheck.enabled": "false",
}
# The partitions Delta rebuilds a table's state with (its transactions, for each idempotent append): 50 by default,
# so a streaming append on a small local JVM spent ~3 s of every ~4 s batch scheduling them (measured: 2 threads,
# 100 rows a batch, 4.4 s -> 1.6 s a batch at 2). On a local master tidemark gives it the JVM's task slots.
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


class DeltaSink(Sink):
    """Appends to a Delta table (by path), one idempotent commit per batch."""

    format: ClassVar[SinkFormat] = SinkFormat.DELTA
    jar_groups: ClassVar[frozenset[JarFeature]] = frozenset({JarFeature.DELTA})
    vouched_by: ClassVar[frozenset[Tool]] = frozenset(Tool)

    lost_checkpoint_risk: ClassVar[str] = "write every window again"
    adopts_in_place: ClassVar[bool] = True
    readers: ClassVar[str] = "the table's readers"
    concurrent_write_errors: ClassVar[tuple[str, ...]] = ("DELTA_CONCURRENT_TRANSACTION",)

    @classmethod
    def claims(cls, folder: Storage) -> bool:
        """True when the folder is a Delta table (its `_delta_log` has a commit or checkpoint)."""
        return has_log(folder)

    @classmethod
    def inspect_folder(
        cls, path: str, checkpoint: Storage, backend: Backend = "auto", spark: Any | None = None
    ) -> SinkInspection:
        """The table's version, files, log reach and the newest batch of the checkpoint it holds (delta-rs)."""
        del backend, spark
        from tidemark.sinks.delta.inspect import inspect_table

        return inspect_table(path, checkpoint)

    def __init__(self, config: TidemarkConfig) -> None:
        super().__init__(config)
        self._location: str | None = None  # a catalog table's folder, once resolved or read from the checkpoint

    @property
    def path(self) -> str | None:
        """The table's folder: `[sink] path`, or for `[sink] table` the location its checkpoint recorded when the
        pipeline resolved it through the catalog (None before that)."""
        if self.config.sink.path or self.config.sink.table is None:
            return self.config.sink.path
        if self._location is None:
            from tidemark.formats import read_sink_transaction
            from tidemark.storage import open_storage

            kept = read_sink_transaction(open_storage(self.config.checkpoint.location))
            self._location = kept.table if kept is not None else None
        return self._location

    def unresolved(self) -> str | None:
        """One line when `[sink] table`'s location is not known without Spark (the checkpoint has not recorded it)."""
        if self.path is not None:
            return None
        return (
            f"the location of the Delta table {self.config.sink.table} is not known yet: the checkpoint "
            f"{self.config.checkpoint.location} records it when `tidemark run` first resolves the name through the "
            "catalog (start the pipeline once), or set [sink] path to the table's folder (DESCRIBE DETAIL shows it)"
        )

    def _table_path(self) -> str:
        """The table's folder, or the one line saying it is not known yet."""
        path = self.path
        if path is None:
            raise InputError(self.unresolved() or "the Delta sink has no path")
        return path

    def resolve_table(self, output: DataFrame) -> str:
        """The folder of `[sink] table` as the session's catalog has it; a table the catalog lacks is created empty
        (the output's columns, the config's partitions). Refused in one line: a table of another format, a
        catalog that now points the name at another folder than this checkpoint wrote to."""
        from tidemark.storage import parse_location

        name = self.config.sink.table or ""
        location = self._catalog_location(output.sparkSession, output)
        if location is None:  # created above when missing: a catalog that did not keep it
            msg = f"[sink] table {name}: the catalog did not keep the table it was asked to create"
            raise InputError(msg)
        recorded = self.path
        if recorded is not None and not parse_location(recorded).same_place(parse_location(location)):
            msg = (
                f"[sink] table {name} is now {location} in the catalog, but the checkpoint "
                f"{self.config.checkpoint.location} wrote to {recorded}: point the name back, or start a new "
                "checkpoint for the new table"
            )
            raise InputError(msg)
        self._location = location
        return location

    def located(self, spark: SparkSession) -> TidemarkConfig:
        """`[sink] table`'s folder from the session's catalog when the checkpoint that recorded it was lost (recover
        reads the table there); the config unchanged when the folder is known or the catalog has no such table."""
        if self.path is not None or self.config.sink.table is None:
            return self.config
        location = self._catalog_location(spark, None)
        if location is None:
            return self.config
        log.info("[sink] table %s is %s in the session's catalog", self.config.sink.table, location)
        return self.config.model_copy(update={"sink": self.config.sink.model_copy(update={"path": location})})

    def _catalog_location(self, spark: SparkSession, output: DataFrame | None) -> str | None:
        """The folder of `[sink] table` in the session's catalog; a missing table is created empty with output's
        columns and the config's partitions (None when there is no output to take them from)."""
        from tidemark.storage import parse_location

        name = self.config.sink.table or ""
        try:
            if not spark.catalog.tableExists(name):
                if output is None:
                    return None
                empty = spark.createDataFrame([], output.schema).write.format("delta")
                partitions = list(self.config.partition_by)
                (empty.partitionBy(*partitions) if partitions else empty).saveAsTable(name)
            detail = spark.sql(f"DESCRIBE DETAIL {name}").collect()[0].asDict()
        except Exception as exc:
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
            msg = f"[sink] table {name}: the catalog could not resolve or create it: {first[:300]}"
            raise InputError(msg) from exc
        if str(detail.get("format", "")).lower() != "delta":
            msg = f"[sink] table {name} is a {detail.get('format')} table, not Delta: name a Delta table or a new one"
            raise InputError(msg)
        found = parse_location(str(detail["location"]))
        return found.key if found.is_local else found.uri

    @property
    def app_id(self) -> str:
        """The transaction id of every commit this pipeline makes, whatever its checkpoint."""
        return f"tidemark:{self.config.pipeline.name}"

    def spark_settings(self) -> Mapping[str, str]:
        """Delta's SQL extension and catalog (a new session), path writes without them (a running one); on a local
        master, state rebuilt in as many partitions as the JVM has task slots (a cluster keeps Delta's 50)."""
        slots = local_threads(self.config.spark.master)
        return SETTINGS if slots is None else {**SETTINGS, SNAPSHOT_PARTITIONS: str(slots)}

    def check(self) -> None:
        """A rollback of the table that was interrupted (the table may already be rolled back, the checkpoint not)
        is finished first: one line naming the command."""
        from tidemark.formats import read_sink_rollback
        from tidemark.storage import open_storage

        undoing = read_sink_rollback(open_storage(self.config.checkpoint.location))
        if undoing is not None:
            msg = (
                f"a rollback of {self.config.checkpoint.location} to batch {undoing} was interrupted (the table may "
                f"already be rolled back, the checkpoint not): finish it with `tidemark recover CONFIG --to-batch "
                f"{undoing} --apply` before running"
            )
            raise InputError(msg)

    def transaction(self) -> SinkTransaction:
        """The checkpoint's sink transaction: kept from its first start (the same table under any spelling of its
        location), else chosen now above the table's own. Refused in one line, before anything is written: a table
        whose protocol tidemark does not vouch for, a table replaced since the checkpoint wrote to it."""
        return self._transaction(open_table(self._table_path()))

    def _transaction(self, found: Any) -> SinkTransaction:
        """transaction() with delta-rs' view of the table already opened (None: no table there yet)."""
        from tidemark.formats import (
            Checkpoint,
            CheckpointStatus,
            SinkTransaction,
            read_recovery_marker,
            read_sink_transaction,
            write_sink_transaction,
        )
        from tidemark.storage import open_storage, parse_location

        checkpoint = open_storage(self.config.checkpoint.location)
        kept = read_sink_transaction(checkpoint)
        table = self._table_path()
        self.check()
        table_id = str(found.metadata().id) if found is not None else None
        if found is not None:
            require_supported(table, protocol_of(found), "write to it")
        if kept is not None and parse_location(kept.table).same_place(parse_location(table)):
            if kept.table_id is not None and table_id is not None and kept.table_id != table_id:
                msg = (
                    f"the Delta table at {table} is not the one the checkpoint {self.config.checkpoint.location} "
                    f"wrote to (table id {table_id}, the checkpoint's {kept.table_id}): it was replaced, and the "
                    "windows the checkpoint committed are not in it. Run `tidemark recover CONFIG` to replay them "
                    "into this table, or point [sink] path back at the old one"
                )
                raise InputError(msg)
            if kept.table_id is None and table_id is not None:
                kept = SinkTransaction(kept.app_id, kept.base, kept.table, table_id)
                write_sink_transaction(checkpoint, kept)
            return kept
        last = found.transaction_version(self.app_id) if found is not None else None
        started = Checkpoint.open(self.config.checkpoint.location).status() is CheckpointStatus.PRESENT
        # A recovery's replay (the checkpoint carries its marker) writes only windows the table does not hold.
        replay = read_recovery_marker(parse_location(self.config.checkpoint.location)) is not None
        if last is not None and not started and not replay:
            msg = (
                f"the checkpoint {self.config.checkpoint.location} has no batch but the Delta table {table} already "
                f"holds this pipeline's output (transaction {self.app_id} version {last}): a new query would write "
                "its windows again. Run `tidemark recover CONFIG` (then --apply) to replay only the windows it lacks, "
                "restore the checkpoint, or point [sink] path at a new table"
            )
            raise InputError(msg)
        made = SinkTransaction(self.app_id, 0 if last is None else int(last) + 1, table, table_id)
        write_sink_transaction(checkpoint, made)
        return made

    def holds_output(self) -> bool:
        """True when the table has a commit carrying this pipeline's transaction."""
        return transaction_version(self._table_path(), self.app_id) is not None

    def writers(self, task_slots: int) -> int | None:
        """Files per output partition per batch: the same stage shape as a file sink's (sinks/base.py)."""
        return file_writers(self.config, task_slots)

    def _written(self, transaction: SinkTransaction, batch: int) -> bool:
        """True when the table already holds the batch's commit (its transaction version or a later one)."""
        last = transaction_version(self._table_path(), transaction.app_id)
        written = last is not None and last >= transaction.version_of(batch)
        if written:
            log.info("batch %d: its Delta commit (version %d of %s) is in the table already", batch, last, self.app_id)
        return written

    def held_windows(self) -> HeldWindows:
        """The window starts the table holds, read from its snapshot (partition values) or its rows."""
        return held_windows(self._table_path())

    def table_rows(self, columns: list[str]) -> Any:
        """The table's rows projected on columns, deletion vectors applied (delta-rs)."""
        return read_rows(self._table_path(), columns)

    def table_output(self, checkpoint: Storage) -> TableOutput:
        """The checkpoint's batches as the table's log holds them: commits carrying its transaction, by batch."""
        from tidemark.formats import read_sink_transaction

        return table_output(self._table_path(), read_sink_transaction(checkpoint))

    def audit(self, checkpoint: Checkpoint, inputs: Mapping[int, tuple[str, ...]]) -> SinkAudit:
        """Each committed batch's commit, read from the table's log (sinks/delta/audit.py)."""
        return audit_commits(checkpoint, self.table_output(checkpoint.store), inputs)

    def check_rows(self, keys: tuple[str, ...], spark: SparkSession | None) -> SinkCheck | None:
        """Rows and repeated keys as delta-rs reads the table (deletion vectors applied)."""
        del spark
        from tidemark.sinks.audit import repeated_keys

        rows, repeated, _ = repeated_keys(read_rows(self._table_path(), list(keys)), keys)
        return SinkCheck(rows, repeated, "delta-rs")

    def plan_rollback(self, checkpoint: Checkpoint, to_batch: int) -> SinkRollback:
        """The table's own undo: one RESTORE commit (plan_table_rollback); no file moves."""
        undo = self.plan_table_rollback(checkpoint.store, to_batch)
        return SinkRollback(to_batch, undo=undo, notes=undo.notes)

    def apply_rollback(self, checkpoint: Storage, plan: SinkRollback) -> None:
        """The RESTORE commit (the caller marked the checkpoint first)."""
        if plan.undo is not None:
            self.apply_table_rollback(checkpoint, plan.undo)

    def plan_table_rollback(self, checkpoint: Storage, to_batch: int) -> TableRollback:
        """Delta's RESTORE to before the first of this checkpoint's commits after to_batch, setting the pipeline's
        transaction back (sinks/delta/rollback.py); refused in one line where it would drop another writer's work."""
        return plan_table_rollback(self._table_path(), self._kept_transaction(checkpoint), to_batch)

    def apply_table_rollback(self, checkpoint: Storage, plan: TableRollback) -> None:
        """The RESTORE commit (nothing when the table is rolled back already)."""
        apply_table_rollback(self._table_path(), self._kept_transaction(checkpoint), plan)

    def _kept_transaction(self, checkpoint: Storage) -> SinkTransaction:
        from tidemark.formats import read_sink_transaction

        transaction = read_sink_transaction(checkpoint)
        if transaction is None:
            msg = (
                f"{checkpoint.uri('')} keeps no Delta transaction (tidemark did not write this table from it): its "
                "batches' commits cannot be told apart from other writers', so they cannot be rolled back"
            )
            raise CheckpointError(msg)
        return transaction

    def configure(self, writer: DataStreamWriter, output: DataFrame) -> DataStreamWriter:
        """A foreachBatch writer appending each batch with the transaction (app id, base + batch)."""
        require_jar_class(output.sparkSession, EXTENSION, "Delta Lake jars")
        if self.config.sink.table is not None:
            self.resolve_table(output)
        path = self._table_path()
        found = open_table(path)  # once: the transaction's checks, and whether the table exists
        transaction = self._transaction(found)
        # A new table gets the config's partitions; an existing one keeps its own (Delta refuses an append that
        # names others: a table tidemark adopted from a plain job, or one made by hand, may have none).
        partition_by = [] if found is not None else list(self.config.partition_by)
        name = self.config.pipeline.name

        first = [True]

        def write_batch(frame: DataFrame, batch: int) -> None:
            if first[0]:  # only a query's first batch can be one whose Delta commit landed before a kill
                first[0] = False
                if self._written(transaction, batch):
                    # Delta would skip the write and leave the batch's state uncommitted (Spark 4.1+ fails the
                    # batch for it): run the batch through Spark's no-op sink instead, so its state commits.
                    frame.write.format("noop").mode("append").save()
                    return
            out = (
                frame.write.format("delta")
                .mode("append")
                .option("txnAppId", transaction.app_id)
                .option("txnVersion", str(transaction.version_of(batch)))
                .option("userMetadata", f"tidemark pipeline {name} batch {batch}")
            )
            if partition_by:
                out = out.partitionBy(*partition_by)
            out.save(path)

        return writer.foreachBatch(write_batch)
