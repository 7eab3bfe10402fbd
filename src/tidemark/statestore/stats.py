"""`state stats`: rows, approximate bytes and partition skew per operator, store and state variable."""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.compat import StrEnum
from tidemark.errors import CheckpointError
from tidemark.formats import TIMER_FAMILIES, Checkpoint, FetchReport, StateReadMethod
from tidemark.spark.lines import Feature, lacking
from tidemark.statestore.files import ReadContext, count_from_files, read_context
from tidemark.statestore.metadata import MetadataSource, StoreInfo, legacy_hint, list_stores, stores_from_files
from tidemark.statestore.reader import ReadTarget, StateSource, read_state, run_action, state_session, targets_of
from tidemark.steps import step

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class Reader(StrEnum):
    """Who reads the state: Spark's statestore reader (4.0+), tidemark from the files, or Spark with files as the
    fallback where Spark lacks the reader or fails on the store (auto)."""

    AUTO = "auto"
    SPARK = "spark"
    FILES = "files"


@dataclass(frozen=True)
class PartitionRows:
    """Rows held by one state partition."""

    id: int
    rows: int


@dataclass(frozen=True)
class VariableStats:
    """Rows of one transformWithState state variable."""

    name: str
    kind: str
    rows: int
    approx_bytes: int | None  # None when read from the files (per variable only the keys are counted)


@dataclass(frozen=True)
class OperatorStats:
    """Size and skew of one (operator, store); `error` (and no rows) when its state cannot be read."""

    id: int
    name: str
    store: str
    rows: int | None
    approx_bytes: int | None  # Spark: key + value as JSON text, sampled; files: the stored bytes exactly
    disk_bytes: int  # this store's files on disk, every partition (a join's four stores each their own)
    partitions: tuple[PartitionRows, ...]
    max_partition_rows: int
    median_partition_rows: float
    skew: float | None
    state_variables: tuple[VariableStats, ...]
    timers: int | None
    note: str | None
    reader: Reader | None = None  # SPARK or FILES: who counted it
    error: str | None = None  # why it could not be read (then rows is None and the command exits 1)


@dataclass(frozen=True)
class StateStats:
    """What the state stores of a checkpoint hold at one batch."""

    checkpoint: str
    batch: int
    metadata: MetadataSource
    operators: tuple[OperatorStats, ...]
    fetched: FetchReport | None = None  # what was copied from remote storage to read it
    note: str | None = None  # what the batch's state means where it is no committed batch's output (Spark 2.1)

    @property
    def unreadable(self) -> list[OperatorStats]:
        """The stores whose state could not be read."""
        return [op for op in self.operators if op.error is not None]


def skew_of(partition_rows: list[int]) -> tuple[int, float, float | None]:
    """Max rows, median rows and max/median (None when the median is 0) over all partitions."""
    if not partition_rows:
        return 0, 0.0, None
    largest = max(partition_rows)
    median = float(statistics.median(partition_rows))
    return largest, median, (round(largest / median, 3) if median > 0 else None)


# Bytes are measured on a sample (the first rows of each partition, then every 64th): serialising every row
# to measure it would cost more than reading the state.
_FULLY_MEASURED_ROWS = 1024
_MEASURE_EVERY = 64
_ROW_INDEX_BITS = 33  # monotonically_increasing_id puts the partition index above bit 33


def _count_target(
    spark: SparkSession, source: StateSource, target: ReadTarget, batch: int | None
) -> tuple[dict[int, int], int]:
    """Rows per partition and approximate bytes (key + value as JSON text, sampled) of one target, in one pass."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    frame = read_state(spark, source, target, batch)
    nested = (StructType, MapType, ArrayType)
    measured_columns = [
        F.to_json(F.col(f.name)) if isinstance(f.dataType, nested) else F.col(f.name).cast("string")
        for f in frame.schema.fields
        if f.name != "partition_id"
    ]
    if target.timers:
        size = F.lit(None).cast("long")
    else:
        row = F.monotonically_increasing_id().bitwiseAND((1 << _ROW_INDEX_BITS) - 1)
        measured = (row < _FULLY_MEASURED_ROWS) | (row.bitwiseAND(_MEASURE_EVERY - 1) == 0)
        # key + value, or a map state's key, user_map_key and user_map_value: every column but the partition.
        text = sum(
            (F.coalesce(F.octet_length(column), F.lit(0)) for column in measured_columns),
            F.lit(0),
        )
        size = F.when(measured, text)

    def _query() -> Any:
        # Non-deterministic ids may not sit inside an aggregate: measure in a projection first.
        sized = frame.select("partition_id", size.alias("size"))
        return sized.groupBy("partition_id").agg(
            F.count(F.lit(1)).alias("rows"), F.sum("size").alias("bytes"), F.count("size").alias("measured")
        )

    query = run_action(_query, source, target, batch)
    rows = run_action(query.collect, source, target, batch)
    per_partition = {int(r["partition_id"]): int(r["rows"]) for r in rows}
    estimate = sum(int(r["bytes"] or 0) * int(r["rows"]) / int(r["measured"]) for r in rows if r["measured"])
    return per_partition, round(estimate)


def _spark_stats(spark: SparkSession, source: StateSource, store: StoreInfo, batch: int | None) -> OperatorStats:
    per_partition = dict.fromkeys(range(store.num_partitions), 0)
    total_bytes = 0
    variables: list[VariableStats] = []
    timers: int | None = None
    kinds = {v.name: v.kind for v in store.variables}
    for target in targets_of(store):
        counts, size = _count_target(spark, source, target, batch)
        if target.timers:
            timers = sum(counts.values())
            continue
        for part, rows in counts.items():
            per_partition[part] = per_partition.get(part, 0) + rows
        total_bytes += size
        if target.state_variable is not None:
            kind = kinds.get(target.state_variable, "")
            variables.append(VariableStats(target.state_variable, kind, sum(counts.values()), size))
    return _stats(store, per_partition, total_bytes, tuple(variables), timers, Reader.SPARK)


def _stats(
    store: StoreInfo,
    per_partition: dict[int, int],
    size: int | None,
    variables: tuple[VariableStats, ...],
    timers: int | None,
    reader: Reader,
    note: str | None = None,
) -> OperatorStats:
    partitions = tuple(PartitionRows(p, n) for p, n in sorted(per_partition.items()))
    largest, median, skew = skew_of([p.rows for p in partitions])
    return OperatorStats(
        id=store.operator_id,
        name=store.operator_name,
        store=store.store,
        rows=sum(p.rows for p in partitions),
        approx_bytes=size,
        disk_bytes=store.disk_bytes,
        partitions=partitions,
        max_partition_rows=largest,
        median_partition_rows=median,
        skew=skew,
        state_variables=variables,
        timers=timers,
        note=note,
        reader=reader,
    )


def _files_stats(checkpoint: Checkpoint, store: StoreInfo, context: ReadContext, single: bool) -> OperatorStats:
    counts = count_from_files(checkpoint, store, context, single)
    kinds = {v.name: v.kind for v in store.variables}
    variables = tuple(
        VariableStats(name, kinds.get(name, ""), rows, None)
        for name, rows in sorted(counts.families.items())
        if name in kinds
    )
    note = None
    if StateReadMethod.SNAPSHOT_COUNT in counts.methods:
        note = "counted from the row count Spark recorded in each RocksDB snapshot (no bytes: the rows are in SSTs)"
    elif counts.families:
        note = (
            "the operator's rows are the keys RocksDB holds (Spark's numRowsTotal); a state variable's are its "
            "entries, a list state's its elements (as Spark's reader gives them)"
        )
    # Registered timers: one key each in the keyToTimestamp family of the operator's time mode.
    timers = (
        next((counts.families[f] for f in TIMER_FAMILIES if f in counts.families), None) if store.has_timers else None
    )
    return _stats(store, counts.per_partition, counts.size, variables, timers, Reader.FILES, note)


def _unreadable(store: StoreInfo, reason: str) -> OperatorStats:
    return OperatorStats(
        id=store.operator_id,
        name=store.operator_name,
        store=store.store,
        rows=None,
        approx_bytes=None,
        disk_bytes=store.disk_bytes,
        partitions=(),
        max_partition_rows=0,
        median_partition_rows=0.0,
        skew=None,
        state_variables=(),
        timers=None,
        note=None,
        error=reason,
    )


def _by_files(
    checkpoint: Checkpoint,
    stores: list[StoreInfo],
    context: ReadContext,
    spark_error: str | None,
    every_store: list[StoreInfo] | None = None,
) -> list[OperatorStats]:
    found = []
    known = every_store or stores
    names = {s.operator_id: {t.store for t in known if t.operator_id == s.operator_id} for s in known}
    for store in stores:
        try:
            stats = _files_stats(checkpoint, store, context, len(names[store.operator_id]) == 1)
            if spark_error is not None:
                stats = replace(stats, note=f"read from the files: Spark's reader failed ({spark_error})")
            found.append(stats)
        except CheckpointError as exc:
            reason = str(exc) if spark_error is None else f"Spark's reader: {spark_error}; from the files: {exc}"
            found.append(_unreadable(store, reason))
    return found


def state_stats(
    path: str | Path, batch: int | None = None, operator: int | None = None, reader: Reader = Reader.AUTO
) -> StateStats:
    """Rows, bytes, per-partition rows and skew of every state store of a checkpoint.

    A store whose state cannot be read is reported with the reason (`error`) instead of rows: never a zero.
    """
    checkpoint = Checkpoint.open(str(path))
    checkpoint.require()
    context = read_context(checkpoint, batch)
    missing_reader = lacking(Feature.STATE_READER)
    if reader is Reader.SPARK and missing_reader is not None:
        msg = f"--reader spark: {missing_reader}"
        raise CheckpointError(msg)
    if checkpoint.before_commit_log():  # Spark's reader reads committed batches, and 2.x wrote no schema files
        if reader is Reader.SPARK:
            msg = f"--reader spark: {context.note}; Spark's state reader needs a commit log: use --reader files"
            raise CheckpointError(msg)
        reader = Reader.FILES
    use_spark = reader is Reader.SPARK or (reader is Reader.AUTO and missing_reader is None)
    if not use_spark:
        stores = _only(stores_from_files(checkpoint, folders_only=True) or [], operator, checkpoint.uri)
        with step("reading state stores from their files", total=len(stores)) as advance:
            by_files = []
            for store in stores:
                by_files += _by_files(checkpoint, [store], context, None, stores)
                advance(1)
        return StateStats(checkpoint.uri, context.batch, _origin(stores), tuple(by_files), note=context.note)
    with state_session(path, (batch,)) as (spark, source):
        stores = _only(list_stores(spark, source), operator, source.uri)
        operators: list[OperatorStats] = []
        with step("reading state stores", total=len(stores)) as advance:
            for store in stores:
                operators += _store_or_files(spark, source, store, batch, reader, (checkpoint, context, stores))
                advance(1)
        return StateStats(source.uri, context.batch, _origin(stores), tuple(operators), source.fetched, context.note)


def _store_or_files(
    spark: SparkSession,
    source: StateSource,
    store: StoreInfo,
    batch: int | None,
    reader: Reader,
    files: tuple[Checkpoint, ReadContext, list[StoreInfo]],
) -> list[OperatorStats]:
    """One store by Spark's reader, or from its files when Spark's fails (unless --reader spark)."""
    try:
        stats = _spark_stats(spark, source, store, batch)
    except CheckpointError as exc:
        if reader is Reader.SPARK:
            return [_unreadable(store, str(exc))]
        log.debug("Spark's reader failed on operator %d: %s", store.operator_id, exc)
        checkpoint, context, stores = files
        return _by_files(checkpoint, [store], context, str(exc), stores)
    return [stats if store.from_metadata else replace(stats, note=legacy_hint(store))]


def _only(stores: list[StoreInfo], operator: int | None, uri: str) -> list[StoreInfo]:
    if operator is not None:
        stores = [s for s in stores if s.operator_id == operator]
    if not stores:
        which = f" for operator {operator}" if operator is not None else ""
        msg = f"{uri} holds no state{which}: nothing to count"
        raise CheckpointError(msg)
    return stores


def _origin(stores: list[StoreInfo]) -> MetadataSource:
    return MetadataSource.STATE_METADATA if all(s.from_metadata for s in stores) else MetadataSource.FOLDERS
