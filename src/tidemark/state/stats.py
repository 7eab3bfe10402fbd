"""`state stats`: rows, approximate bytes and partition skew per operator, store and state variable."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.errors import CheckpointError
from tidemark.formats import FetchReport
from tidemark.state.metadata import MetadataSource, StoreInfo, legacy_hint, list_stores
from tidemark.state.reader import ReadTarget, StateSource, read_state, run_action, state_session, targets_of
from tidemark.steps import step

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
    approx_bytes: int


@dataclass(frozen=True)
class OperatorStats:
    """Size and skew of one (operator, store)."""

    id: int
    name: str
    store: str
    rows: int
    approx_bytes: int
    disk_bytes: int
    partitions: tuple[PartitionRows, ...]
    max_partition_rows: int
    median_partition_rows: float
    skew: float | None
    state_variables: tuple[VariableStats, ...]
    timers: int | None
    note: str | None


@dataclass(frozen=True)
class StateStats:
    """What the state stores of a checkpoint hold at one batch."""

    checkpoint: str
    batch: int
    metadata: MetadataSource
    operators: tuple[OperatorStats, ...]
    fetched: FetchReport | None = None  # what was copied from remote storage to read it


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

    frame = read_state(spark, source, target, batch)
    if target.timers:
        size = F.lit(None).cast("long")
    else:
        row = F.monotonically_increasing_id().bitwiseAND((1 << _ROW_INDEX_BITS) - 1)
        measured = (row < _FULLY_MEASURED_ROWS) | (row.bitwiseAND(_MEASURE_EVERY - 1) == 0)
        text = F.octet_length(F.to_json(F.col("key"))) + F.coalesce(F.octet_length(F.to_json(F.col("value"))), F.lit(0))
        size = F.when(measured, text)
    # Non-deterministic ids may not sit inside an aggregate: measure in a projection first.
    sized = frame.select("partition_id", size.alias("size"))
    query = sized.groupBy("partition_id").agg(
        F.count(F.lit(1)).alias("rows"), F.sum("size").alias("bytes"), F.count("size").alias("measured")
    )
    rows = run_action(query.collect, source, target, batch)
    per_partition = {int(r["partition_id"]): int(r["rows"]) for r in rows}
    estimate = sum(int(r["bytes"] or 0) * int(r["rows"]) / int(r["measured"]) for r in rows if r["measured"])
    return per_partition, round(estimate)


def _store_stats(spark: SparkSession, source: StateSource, store: StoreInfo, batch: int | None) -> OperatorStats:
    per_partition = dict.fromkeys(range(store.num_partitions), 0)
    total_bytes = 0
    variables: list[VariableStats] = []
    timers: int | None = None
    note = None if store.from_metadata else legacy_hint(store)
    kinds = {v.name: v.kind for v in store.variables}
    try:
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
    except CheckpointError as exc:
        if store.from_metadata:
            raise
        note = f"{legacy_hint(store)} ({exc})"
    partitions = tuple(PartitionRows(p, n) for p, n in sorted(per_partition.items()))
    largest, median, skew = skew_of([p.rows for p in partitions])
    return OperatorStats(
        id=store.operator_id,
        name=store.operator_name,
        store=store.store,
        rows=sum(p.rows for p in partitions),
        approx_bytes=total_bytes,
        disk_bytes=store.disk_bytes,
        partitions=partitions,
        max_partition_rows=largest,
        median_partition_rows=median,
        skew=skew,
        state_variables=tuple(variables),
        timers=timers,
        note=note,
    )


def state_stats(path: str | Path, batch: int | None = None, operator: int | None = None) -> StateStats:
    """Rows, approximate bytes, per-partition rows and skew of every state store of a checkpoint."""
    with state_session(path, (batch,)) as (spark, source):
        stores = list_stores(spark, source)
        if operator is not None:
            stores = [s for s in stores if s.operator_id == operator]
        if not stores:
            which = f" for operator {operator}" if operator is not None else ""
            msg = f"{source} holds no state{which}: nothing to count"
            raise CheckpointError(msg)
        with step("reading state stores", total=len(stores)) as advance:
            counted = []
            for store in stores:
                counted.append(_store_stats(spark, source, store, batch))
                advance(1)
        operators = tuple(counted)
        origin = MetadataSource.STATE_METADATA if all(s.from_metadata for s in stores) else MetadataSource.FOLDERS
        at = batch if batch is not None else source.checkpoint.latest_committed_batch()
        return StateStats(source.uri, at, origin, operators, source.fetched)
