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

from tidemark.config import SinkFormat
from tidemark.errors import EnvironmentProblem, InputError
from tidemark.sinks.base import Sink, TableCommit, TableOutput, Tool
from tidemark.sinks.parquet import ParquetSink
from tidemark.spark.artifacts import JarFeature

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter

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


class DeltaSink(Sink):
    """Appends to a Delta table (by path), one idempotent commit per batch."""

    format: ClassVar[SinkFormat] = SinkFormat.DELTA
    jar_groups: ClassVar[frozenset[JarFeature]] = frozenset({JarFeature.DELTA})
    vouched_by: ClassVar[frozenset[Tool]] = frozenset({Tool.AUDIT, Tool.RECOVER})
    exactly_once_gap: ClassVar[str | None] = (
        "it does not handle a Delta sink yet (docs/delta.md); the Delta sink itself is exactly once through "
        "restarts and kills (its commits carry tidemark's transaction ids): keep its checkpoint"
    )

    @property
    def app_id(self) -> str:
        """The transaction id of every commit this pipeline makes, whatever its checkpoint."""
        return f"tidemark:{self.config.pipeline.name}"

    def spark_settings(self) -> Mapping[str, str]:
        """Delta's SQL extension and catalog (a new session), path writes without them (a running one)."""
        return SETTINGS

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
        table = self.path or ""
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
        from tidemark.formats import read_sink_transaction, read_snapshot
        from tidemark.storage import open_storage

        table = self.path or ""
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
        for commit in snapshot.commits:
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

    def configure(self, writer: DataStreamWriter, output: DataFrame) -> DataStreamWriter:
        """A foreachBatch writer appending each batch with the transaction (app id, base + batch)."""
        _require_delta(output)
        transaction = self.transaction()
        path = self.path or ""
        partition_by = list(self.config.partition_by)
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
