"""`state expired`: keys whose event-time timeout or timer is behind the committed watermark but still hold state."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.compat import StrEnum
from tidemark.errors import UsageError
from tidemark.formats import FetchReport
from tidemark.statestore.metadata import StoreInfo, list_stores
from tidemark.statestore.reader import ReadTarget, StateSource, read_state, run_action, state_session
from tidemark.steps import step

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

NO_TIMEOUT = -1  # what (flat)MapGroupsWithState stores when no timeout is set
TIMEOUT_FIELD = "timeoutTimestamp"


class ExpiredReason(StrEnum):
    """Why a key counts as expired-but-kept; each comes with its own fix in the docs."""

    FIRED_NOT_REMOVED = "FIRED_NOT_REMOVED"  # timeout passed the batch's own watermark: the function ran, kept state
    OVERDUE = "OVERDUE"  # behind the committed watermark, fires only when another batch runs
    NO_TIMER = "NO_TIMER"  # transformWithState key with state and no timer left to ever clear it
    NOT_EVICTED = "NOT_EVICTED"  # event time behind the watermark its own batch evicted with, yet still in state


@dataclass(frozen=True)
class ExpiredKey:
    """One key that holds state its timeout or timer says should be gone."""

    key: Any
    partition: int
    timeout_ms: int | None
    reason: ExpiredReason


@dataclass(frozen=True)
class ExpiredOperator:
    """Expired-but-kept keys of one stateful operator."""

    id: int
    name: str
    kind: str
    checked: bool
    keys_with_state: int
    keys_without_timeout: int
    expired: int
    by_reason: dict[str, int]
    keys: tuple[ExpiredKey, ...]
    note: str | None


@dataclass(frozen=True)
class ExpiredReport:
    """The expired-but-kept keys of a checkpoint, judged against the watermarks of one committed batch."""

    checkpoint: str
    batch: int
    batch_watermark_ms: int
    committed_watermark_ms: int
    operators: tuple[ExpiredOperator, ...]
    fetched: FetchReport | None = None  # what was copied from remote storage to read it

    @property
    def expired(self) -> int:
        """Expired-but-kept keys over all operators."""
        return sum(op.expired for op in self.operators)


def _skipped(store: StoreInfo, kind: str, note: str) -> ExpiredOperator:
    return ExpiredOperator(store.operator_id, store.operator_name, kind, False, 0, 0, 0, {}, (), note)


def _summarise(
    store: StoreInfo,
    kind: str,
    flagged: DataFrame,
    with_state: int,
    without_timeout: int,
    limit: int,
    source: StateSource,
) -> ExpiredOperator:
    target = ReadTarget(store.operator_id, store.store)
    counts = {
        str(r["reason"]): int(r["count"])
        for r in run_action(flagged.groupBy("reason").count().collect, source, target, None)
    }
    sample = run_action(flagged.orderBy("timeout_ms", "k").limit(limit).collect, source, target, None)
    keys = tuple(
        ExpiredKey(
            json.loads(r["k"]),
            int(r["partition_id"]),
            int(r["timeout_ms"]) if r["timeout_ms"] is not None else None,
            ExpiredReason(r["reason"]),
        )
        for r in sample
    )
    return ExpiredOperator(
        id=store.operator_id,
        name=store.operator_name,
        kind=kind,
        checked=True,
        keys_with_state=with_state,
        keys_without_timeout=without_timeout,
        expired=sum(counts.values()),
        by_reason=dict(sorted(counts.items())),
        keys=keys,
        note=None,
    )


def _group_state(
    spark: SparkSession, source: StateSource, store: StoreInfo, batch: int, marks: tuple[int, int], limit: int
) -> ExpiredOperator:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    batch_wm, committed_wm = marks
    target = ReadTarget(store.operator_id, store.store)
    frame = read_state(spark, source, target, batch)
    value_type = frame.schema["value"].dataType
    if not isinstance(value_type, StructType) or TIMEOUT_FIELD not in value_type.fieldNames():
        return _evicted_by_watermark(source, store, frame, batch, marks, limit)
    timeout = F.col(f"value.{TIMEOUT_FIELD}")
    totals = run_action(
        frame.agg(
            F.count(F.lit(1)).alias("n"), F.sum(F.when(timeout == NO_TIMEOUT, 1).otherwise(0)).alias("none")
        ).first,
        source,
        target,
        batch,
    )
    reason = (
        F.when(timeout == NO_TIMEOUT, F.lit(None))
        .when(timeout >= F.lit(committed_wm), F.lit(None))
        .when(timeout < F.lit(batch_wm), F.lit(ExpiredReason.FIRED_NOT_REMOVED.value))
        .otherwise(F.lit(ExpiredReason.OVERDUE.value))
    )
    flagged = frame.select(
        F.to_json(F.col("key")).alias("k"), "partition_id", timeout.alias("timeout_ms"), reason.alias("reason")
    ).where(F.col("reason").isNotNull())
    return _summarise(store, "group-state timeout", flagged, int(totals["n"]), int(totals["none"] or 0), limit, source)


def _window_end(data_type: Any) -> bool:
    from pyspark.sql.types import StructType, TimestampType

    return (
        isinstance(data_type, StructType)
        and {"start", "end"} <= set(data_type.fieldNames())
        and isinstance(data_type["end"].dataType, TimestampType)
    )


def eviction_time(frame: DataFrame) -> tuple[str, Column] | None:
    """(kind, epoch-ms column) of the event time Spark evicts a state row by once the watermark passes it.

    Window aggregation: the key's window end; session window: the value's session end; dropDuplicates with a
    watermark: the key's event-time column; dropDuplicatesWithinWatermark: the value's expiry. None: no event
    time in the state (nothing the watermark removes).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, TimestampType

    key, value = frame.schema["key"].dataType, frame.schema["value"].dataType
    key_fields = key.fields if isinstance(key, StructType) else []
    value_fields = value.fields if isinstance(value, StructType) else []
    for field in key_fields:
        if _window_end(field.dataType):
            return "window", F.unix_millis(F.col("key").getField(field.name).getField("end"))
    for field in value_fields:
        if _window_end(field.dataType):
            return "session", F.unix_millis(F.col("value").getField(field.name).getField("end"))
    for field in value_fields:
        if field.name == "expiresAtMicros":
            return "dedup within watermark", F.floor(F.col("value.expiresAtMicros") / 1000)
    for field in key_fields:
        if isinstance(field.dataType, TimestampType):
            return "dedup", F.unix_millis(F.col("key").getField(field.name))
    return None


def _evicted_by_watermark(
    source: StateSource, store: StoreInfo, frame: DataFrame, batch: int, marks: tuple[int, int], limit: int
) -> ExpiredOperator:
    """Rows Spark removes once the watermark passes their event time (Spark evicts at event time <= watermark)."""
    from pyspark.sql import functions as F

    found = eviction_time(frame)
    if found is None:
        return _skipped(store, "none", "no event time in the state: nothing is removed by the watermark")
    kind, event_ms = found
    batch_wm, committed_wm = marks
    target = ReadTarget(store.operator_id, store.store)
    with_state = run_action(frame.count, source, target, batch)
    reason = (
        F.when(event_ms > F.lit(committed_wm), F.lit(None))
        .when(event_ms <= F.lit(batch_wm), F.lit(ExpiredReason.NOT_EVICTED.value))
        .otherwise(F.lit(ExpiredReason.OVERDUE.value))
    )
    flagged = frame.select(
        F.to_json(F.col("key")).alias("k"), "partition_id", event_ms.alias("timeout_ms"), reason.alias("reason")
    ).where(F.col("reason").isNotNull())
    return _summarise(store, kind, flagged, int(with_state), 0, limit, source)


def _timers(
    spark: SparkSession, source: StateSource, store: StoreInfo, batch: int, committed_wm: int, limit: int
) -> ExpiredOperator:
    from pyspark.sql import functions as F

    if store.time_mode != "EventTime":
        return _skipped(store, "timers", f"time mode {store.time_mode}: only event-time timers are judged by watermark")
    keyed = [
        read_state(spark, source, ReadTarget(store.operator_id, store.store, v.name), batch).select(
            F.to_json(F.col("key")).alias("k"), "partition_id"
        )
        for v in store.variables
    ]
    if not keyed:
        return _skipped(store, "timers", "no state variables")
    state_keys = keyed[0]
    for other in keyed[1:]:
        state_keys = state_keys.unionByName(other)
    state_keys = state_keys.distinct().cache()
    try:
        timers = read_state(spark, source, ReadTarget(store.operator_id, store.store, timers=True), batch).select(
            F.to_json(F.col("key")).alias("k"), "partition_id", F.col("expiration_timestamp_ms").alias("timeout_ms")
        )
        overdue = timers.where(F.col("timeout_ms") < F.lit(committed_wm)).join(state_keys.select("k"), "k", "left_semi")
        overdue = overdue.withColumn("reason", F.lit(ExpiredReason.OVERDUE.value))
        orphans = state_keys.join(timers.select("k"), "k", "left_anti").select(
            "k",
            "partition_id",
            F.lit(None).cast("long").alias("timeout_ms"),
            F.lit(ExpiredReason.NO_TIMER.value).alias("reason"),
        )
        with_state = run_action(state_keys.count, source, ReadTarget(store.operator_id, store.store), batch)
        flagged = overdue.unionByName(orphans)
        result = _summarise(store, "timers", flagged, int(with_state), 0, limit, source)
    finally:
        state_keys.unpersist()
    return result


def find_expired(
    path: str | Path, batch: int | None = None, operator: int | None = None, limit: int = 100
) -> ExpiredReport:
    """Keys behind the committed watermark that still hold state, per operator with timeouts or timers."""
    if limit < 0:
        msg = "--limit must be 0 or more"
        raise UsageError(msg)
    with state_session(path, (batch,)) as (spark, source):
        at = batch if batch is not None else source.checkpoint.latest_committed_batch()
        batch_wm = source.checkpoint.offset(at).watermark_ms
        committed_wm = source.checkpoint.commit(at).next_watermark_ms
        stores = [s for s in list_stores(spark, source) if operator is None or s.operator_id == operator]
        if not stores:
            msg = f"no state in {source}{f' for operator {operator}' if operator is not None else ''}"
            raise UsageError(msg)
        results = []
        with step("judging state stores", total=len(stores)) as advance:
            for store in stores:
                results.append(_judge(spark, source, store, at, (batch_wm, committed_wm), limit))
                advance(1)
        return ExpiredReport(source.uri, at, batch_wm, committed_wm, tuple(results), source.fetched)


def _judge(
    spark: SparkSession, source: StateSource, store: StoreInfo, at: int, marks: tuple[int, int], limit: int
) -> ExpiredOperator:
    batch_wm, committed_wm = marks
    if committed_wm <= 0:
        return _skipped(store, "none", "the query has no watermark: nothing is removed by it")
    if store.is_transform_with_state:
        return _timers(spark, source, store, at, committed_wm, limit)
    if store.store != "default":
        return _skipped(store, "none", "join stores have no timeouts")
    return _group_state(spark, source, store, at, (batch_wm, committed_wm), limit)
