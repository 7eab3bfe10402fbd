"""Measured inputs of the break point: the state's series from a progress log, row sizes from a checkpoint."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.compat import UTC
from tidemark.config.model import PROVIDER_KEY, StateStoreKind
from tidemark.errors import UsageError
from tidemark.formats import BatchProgress, read_progress
from tidemark.sizing.load import detect_state_store
from tidemark.sizing.resident import RowShape, shape_from_version_bytes, unsafe_row_bytes
from tidemark.sizing.trend import DEFAULT_WINDOW, StatePoint

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType

    from tidemark.formats import Checkpoint

_PARTITIONS_KEY = "spark.sql.shuffle.partitions"
_RETAINED_KEY = "spark.sql.streaming.maxBatchesToRetainInMemory"


@dataclass(frozen=True)
class MeasuredState:
    """What a run measured about its state: the series, the row sizes and how many store instances it has."""

    source: str
    state_store: StateStoreKind | None
    points: tuple[StatePoint, ...]
    shape: RowShape | None
    state_instances: int | None
    retained_versions: int | None = None
    # False: the log's numRowsTotal was not counted (RocksDB, trackTotalNumberOfRows off): its rows are no figure.
    rows_tracked: bool = True


def _point(batch: BatchProgress) -> StatePoint:
    ops = batch.state_operators
    return StatePoint(
        batch_id=batch.batch_id,
        rows=sum(op.num_rows_total for op in ops),
        timestamp=batch.timestamp,
        input_rows=batch.num_input_rows,
        updated_rows=sum(op.num_rows_updated for op in ops),
        memory_used_bytes=sum(op.memory_used_bytes for op in ops),
    )


def _version_bytes_per_key(batches: Sequence[BatchProgress]) -> float | None:
    """Median of stateOnCurrentVersionSizeBytes / rows over the batches (HDFS-backed store only)."""
    ratios = []
    for batch in batches:
        rows = sum(op.num_rows_total for op in batch.state_operators)
        size = sum(op.custom_metrics.get("stateOnCurrentVersionSizeBytes", 0.0) for op in batch.state_operators)
        if rows > 0 and size > 0:
            ratios.append(size / rows)
    return statistics.median(ratios) if ratios else None


def measured_from_progress(progress: Sequence[BatchProgress], source: str) -> MeasuredState:
    """The state series of the stateful batches (a batch run twice counts once: its last run)."""
    stateful = {p.batch_id: p for p in progress if p.state_operators}
    if not stateful:
        msg = f"{source} holds no progress of a stateful query: give the progress log of a run with state"
        raise UsageError(msg)
    batches = [stateful[b] for b in sorted(stateful)]
    recent = batches[-DEFAULT_WINDOW:]
    per_key = _version_bytes_per_key(recent)
    instances = max(sum(op.num_state_store_instances for op in b.state_operators) for b in recent)
    return MeasuredState(
        source=source,
        state_store=detect_state_store(batches),
        points=tuple(_point(b) for b in batches),
        shape=shape_from_version_bytes(per_key) if per_key is not None else None,
        state_instances=instances or None,
        rows_tracked=not any(b.state_rows_untracked for b in batches),
    )


def measured_from_log(path: str | Path) -> MeasuredState:
    """Read a progress log (file or folder) and take its state series."""
    return measured_from_progress(read_progress(path), str(path))


# --- from a checkpoint, through Spark's state reader ---------------------------------------------------------


def _unsafe_bytes(column: Column, data_type: DataType) -> Column:
    """An expression for the UnsafeRow size of a struct column: 8 bytes a field plus padded variable parts."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, DecimalType, StringType, StructType

    if not isinstance(data_type, StructType):
        return F.lit(0)
    fields = data_type.fields
    size: Column = F.lit(unsafe_row_bytes(len(fields)))
    for field in fields:
        value = column.getField(field.name)
        kind = field.dataType
        if isinstance(kind, StringType | BinaryType):
            variable = F.coalesce(F.octet_length(value), F.lit(0))
        elif isinstance(kind, DecimalType) and kind.precision > 18:
            variable = F.lit(16)
        elif isinstance(kind, StructType):
            variable = _unsafe_bytes(value, kind)
        elif kind.typeName() in ("array", "map", "variant"):
            # Close enough for planning: the JSON text of the element data.
            variable = F.coalesce(F.octet_length(F.to_json(value)), F.lit(0))
        else:
            continue
        size = size + F.ceil(variable / 8) * 8
    return size


@dataclass(frozen=True)
class _Sizes:
    rows: int
    key_bytes: float
    value_bytes: float


def _sizes_at(spark: Any, source: Any, stores: Sequence[Any], batch: int) -> _Sizes:
    from pyspark.sql import functions as F

    from tidemark.statestore.reader import read_state, run_action, targets_of

    rows, key_total, value_total = 0, 0.0, 0.0
    for store in stores:
        for target in targets_of(store, include_timers=False):
            frame = read_state(spark, source, target, batch)
            schema = {f.name: f.dataType for f in frame.schema.fields}
            key = _unsafe_bytes(F.col("key"), schema["key"]) if "key" in schema else F.lit(0)
            value = _unsafe_bytes(F.col("value"), schema["value"]) if "value" in schema else F.lit(0)
            query = frame.agg(F.count(F.lit(1)).alias("rows"), F.sum(key).alias("k"), F.sum(value).alias("v"))
            row = run_action(query.collect, source, target, batch)[0]
            rows += int(row["rows"])
            key_total += float(row["k"] or 0)
            value_total += float(row["v"] or 0)
    if rows == 0:
        return _Sizes(0, 0.0, 0.0)
    return _Sizes(rows, key_total / rows, value_total / rows)


def _timestamp(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms > 0 else None


def _earlier_batch(checkpoint: Checkpoint, latest: int, lookback: int) -> int:
    """The oldest committed batch within lookback whose state every store can still rebuild (latest when none).

    Only batches whose commit and offset entries are still there count: after `checkpoint prune` (or Spark's own
    cleanup) state files can outlive the log entries the state reader needs.
    """
    stores = list(checkpoint.stores().values())
    committed = set(checkpoint.commit_batches()) & set(checkpoint.offset_batches())
    for batch in range(max(0, latest - lookback), latest):
        if batch not in committed:
            continue
        # State version v is what batch v - 1 committed.
        if stores and all(store.can_load(batch + 1) for store in stores):
            return batch
    return latest


def measured_from_checkpoint(path: str | Path, lookback: int = 10, batch: int | None = None) -> MeasuredState:
    """Rows and UnsafeRow key/value sizes at the latest batch, rows at an older batch, batch times.

    Reads the state twice with Spark's statestore reader: at the latest committed batch and at the oldest
    batch within `lookback` whose state files are all still there. Batch times come from the offsets log.
    """
    from tidemark.formats import Checkpoint
    from tidemark.statestore.metadata import list_stores
    from tidemark.statestore.reader import state_session

    checkpoint = Checkpoint.open(str(path))
    checkpoint.require()
    latest = checkpoint.latest_committed_batch()
    if batch is not None:
        committed = checkpoint.commit_batches()
        if batch not in committed:
            span = f"{committed[0]}..{committed[-1]}" if committed else "none"
            msg = f"--batch {batch} is not a committed batch of {path} (committed batches: {span})"
            raise UsageError(msg)
        latest = batch
    earlier = _earlier_batch(checkpoint, latest, lookback)
    batches: tuple[int | None, ...] = (latest, earlier) if earlier < latest else (latest,)
    with state_session(path, batches) as (spark, source):
        stores = list_stores(spark, source)
        if not stores:
            msg = f"{source} holds no state: nothing to plan for"
            raise UsageError(msg)
        offsets = source.checkpoint.offset(latest)
        conf = offsets.conf
        store_kind = StateStoreKind.of_provider(conf.get(PROVIDER_KEY))
        now = _sizes_at(spark, source, stores, latest)
        points = [StatePoint(latest, now.rows, _timestamp(offsets.timestamp_ms))]
        if earlier < latest:
            before = _sizes_at(spark, source, stores, earlier)
            entry = source.checkpoint.find_offset(earlier)
            stamp = _timestamp(entry.timestamp_ms) if entry is not None else None
            points.insert(0, StatePoint(earlier, before.rows, stamp))
        partitions = conf.get(_PARTITIONS_KEY)
        retained = conf.get(_RETAINED_KEY)
        return MeasuredState(
            source=str(path),
            state_store=store_kind,
            points=tuple(points),
            shape=RowShape(now.key_bytes, now.value_bytes, origin="checkpoint (state reader)"),
            state_instances=sum(s.num_partitions for s in stores) or (int(partitions) if partitions else None),
            retained_versions=int(retained) if retained and retained.isdigit() else None,
        )
