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
from tidemark.errors import CheckpointError, EnvironmentProblem, InputError
from tidemark.sinks.base import Sink, TableCommit, TableOutput, TableRollback, Tool
from tidemark.sinks.parquet import ParquetSink
from tidemark.spark.artifacts import JarFeature

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from tidemark.config import TidemarkConfig
    from tidemark.formats import SinkTransaction
    from tidemark.storage import Storage

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
        if recorded is not None and parse_location(recorded) != parse_location(location):
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
        """The checkpoint's sink transaction: kept from its first start, else chosen now above the table's own."""
        from tidemark.formats import (
            Checkpoint,
            CheckpointStatus,
            SinkTransaction,
            read_recovery_marker,
            read_sink_transaction,
            read_snapshot,
            write_sink_transaction,
        )
        from tidemark.storage import open_storage, parse_location

        checkpoint = open_storage(self.config.checkpoint.location)
        kept = read_sink_transaction(checkpoint)
        table = self._table_path()
        self.check()
        if kept is not None and kept.table == table:
            return kept
        last = read_snapshot(open_storage(table)).transactions.get(self.app_id)
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
        made = SinkTransaction(self.app_id, 0 if last is None else last + 1, table)
        write_sink_transaction(checkpoint, made)
        return made

    def holds_output(self) -> bool:
        """True when the table has a commit carrying this pipeline's transaction."""
        from tidemark.formats import read_snapshot
        from tidemark.storage import open_storage

        return self.app_id in read_snapshot(open_storage(self._table_path())).transactions

    # Files per output partition per batch: the same stage shape as the Parquet sink's (sinks/parquet.py).
    writers = ParquetSink.writers

    def _written(self, transaction: SinkTransaction, batch: int) -> bool:
        """True when the table already holds the batch's commit (its transaction version or a later one)."""
        from tidemark.formats import read_snapshot
        from tidemark.storage import open_storage

        last = read_snapshot(open_storage(transaction.table)).transactions.get(transaction.app_id)
        written = last is not None and last >= transaction.version_of(batch)
        if written:
            log.info("batch %d: its Delta commit (version %d of %s) is in the table already", batch, last, self.app_id)
        return written

    def table_output(self, checkpoint: Storage) -> TableOutput | None:
        """The checkpoint's batches as the table's log holds them: commits carrying its transaction, by batch."""
        from tidemark.formats import ROLLBACK_OPERATION, read_sink_transaction, read_snapshot
        from tidemark.storage import open_storage

        table = self._table_path()
        snapshot = read_snapshot(open_storage(table), every_commit=True)
        transaction = read_sink_transaction(checkpoint)
        notes: list[str] = []
        if transaction is None:
            notes.append(
                "the checkpoint keeps no Delta transaction (tidemark did not start it on this table): its batches "
                "cannot be told apart from other writers' commits"
            )
        mine: list[TableCommit] = []
        others: list[str] = []
        earlier = 0
        undone = 0
        for commit in snapshot.commits:
            if (
                commit.operation == ROLLBACK_OPERATION
                and transaction is not None
                and commit.app_id == transaction.app_id
            ):
                # `recover --to-batch`: the commits of the batches after the one it kept are undone (their files
                # removed by this commit); the re-run batches write their versions again.
                kept_batch = transaction.batch_of(commit.txn_version or 0)
                undone += sum(1 for c in mine if c.batch > kept_batch)
                mine = [c for c in mine if c.batch <= kept_batch]
                continue
            if transaction is not None and commit.app_id == transaction.app_id and commit.txn_version is not None:
                batch = transaction.batch_of(commit.txn_version)
                if batch < 0:  # this pipeline's, from a checkpoint before this one (a recovery started a new one)
                    earlier += 1
                    continue
                files = tuple(f.path for f in commit.added)
                mine.append(TableCommit(batch, commit.version, files, commit.rows_added))
            elif commit.added or commit.removed:
                others.append(commit.app_id or commit.operation or "unknown")
        if earlier:
            notes.append(f"{earlier} commit(s) by this pipeline's earlier checkpoints (before a recovery)")
        if undone:
            notes.append(f"{undone} commit(s) undone by `tidemark recover --to-batch` (their files removed)")
        first = None
        if snapshot.oldest_commit is not None and snapshot.oldest_commit > 0:
            first = mine[0].batch if mine else None
            notes.append(
                f"Delta's log retention removed commits 0 to {snapshot.oldest_commit - 1}: batches written before "
                "then cannot be checked one by one (their rows are still in the table)"
            )
        return TableOutput(
            uri=snapshot.uri,
            commits=tuple(mine),
            live_files=tuple(sorted(snapshot.files)),
            other_commits=len(others),
            other_writers=tuple(sorted(set(others))),
            first_batch_held=first,
            notes=tuple(notes),
            log_trimmed=bool(snapshot.oldest_commit),
        )

    def plan_table_rollback(self, checkpoint: Storage, to_batch: int) -> TableRollback:
        """The commits of this checkpoint's batches after to_batch, to be removed by one commit that also sets the
        pipeline's transaction back to to_batch's version; refused in one line where their files are no longer
        live on their own (a compaction rewrote them) or the log no longer reaches them."""
        from tidemark.formats import read_sink_transaction, read_snapshot
        from tidemark.storage import open_storage

        transaction = read_sink_transaction(checkpoint)
        if transaction is None:
            msg = (
                f"{checkpoint.uri('')} keeps no Delta transaction (tidemark did not write this table from it): its "
                "batches' commits cannot be told apart from other writers', so they cannot be rolled back"
            )
            raise CheckpointError(msg)
        output = self.table_output(checkpoint)
        assert output is not None
        if not output.checks_batch(to_batch + 1):
            msg = (
                f"Delta's log retention removed the commits of the batches after {to_batch} from {output.uri}: they "
                "cannot be taken out one by one; pick a later batch"
            )
            raise CheckpointError(msg)
        undone = tuple(c for c in output.commits if c.batch > to_batch)
        live = set(output.live_files)
        for commit in undone:
            gone = [f for f in commit.files if f not in live]
            if gone:
                msg = (
                    f"batch {commit.batch}'s files (table version {commit.version}) are no longer live in "
                    f"{output.uri} (a later commit, such as OPTIMIZE, rewrote them with other rows): its rows cannot "
                    "be taken out alone; pick a later batch, or RESTORE the table by hand"
                )
                raise CheckpointError(msg)
        current = read_snapshot(open_storage(transaction.table)).transactions.get(transaction.app_id)
        target = transaction.version_of(to_batch)
        reset = target if undone or (current is not None and current > target) else None
        notes: tuple[str, ...] = ()
        if reset is not None:
            notes = (f"the table's transaction {transaction.app_id} goes back to version {target} (batch {to_batch})",)
        return TableRollback(output.uri, to_batch, undone, reset, notes)

    def apply_table_rollback(self, checkpoint: Storage, plan: TableRollback) -> None:
        """One commit: the undone batches' files removed, the transaction set back (nothing when already done)."""
        import time

        from tidemark.formats import read_sink_transaction, read_snapshot, write_rollback_commit
        from tidemark.storage import open_storage

        if plan.reset_to is None:
            return
        transaction = read_sink_transaction(checkpoint)
        assert transaction is not None
        table = open_storage(transaction.table)
        snapshot = read_snapshot(table)
        assert snapshot.version is not None
        files = [snapshot.files[f] for f in plan.files]
        version = write_rollback_commit(
            table,
            snapshot.version,
            app_id=transaction.app_id,
            txn_version=plan.reset_to,
            files=files,
            to_batch=plan.to_batch,
            now_ms=int(time.time() * 1000),
        )
        log.info("rolled %s back to batch %d in commit %d", transaction.table, plan.to_batch, version)

    def configure(self, writer: DataStreamWriter, output: DataFrame) -> DataStreamWriter:
        """A foreachBatch writer appending each batch with the transaction (app id, base + batch)."""
        _require_delta(output)
        from tidemark.formats import read_snapshot
        from tidemark.storage import open_storage

        if self.config.sink.table is not None:
            self.resolve_table(output)
        transaction = self.transaction()
        path = self._table_path()
        # A new table gets the config's partitions; an existing one keeps its own (Delta refuses an append that
        # names others: a table tidemark adopted from a plain job, or one made by hand, may have none).
        exists = read_snapshot(open_storage(path)).exists
        partition_by = [] if exists else list(self.config.partition_by)
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


def _require_delta(output: DataFrame) -> None:
    """One line when the session's JVM has no Delta Lake (a running session started without its jars)."""
    jvm: Any = output.sparkSession._jvm  # py4j's view of the JVM
    try:
        jvm.org.apache.spark.util.Utils.classForName(EXTENSION, True, False)
    except Exception as exc:
        msg = (
            "this Spark session has no Delta Lake jars (a session's classpath is fixed when it starts): start it "
            "with the jars `tidemark jars list CONFIG` lists on spark.jars, or let tidemark start it"
        )
        raise EnvironmentProblem(msg) from exc
