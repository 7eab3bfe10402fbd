"""Immutable typed records of Spark's StreamingQueryProgress, built from its JSON (no JVM needed)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidemark.compat import UTC
from tidemark.formats.kafka_offsets import PartitionLag, source_lags


def parse_spark_time(text: str | None) -> datetime | None:
    """Parse Spark's progress timestamps ('2026-01-01T00:10:00.000Z') as aware UTC datetimes."""
    if not text:
        return None
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


_NUMBER = (int, float)


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    return int(value) if isinstance(value, _NUMBER) else 0


def _float(data: Mapping[str, Any], key: str) -> float:
    value = data.get(key)
    return float(value) if isinstance(value, _NUMBER) else 0.0


class NumericMetrics(Mapping[str, float]):
    """A read-only view of Spark's customMetrics: the numeric entries, as floats.

    Filtered when read rather than copied when parsed: a RocksDB operator reports about 40 of them in every
    batch, and most readers of a long log never look at them.
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = raw

    def __getitem__(self, key: str) -> float:
        value = self._raw[key]
        if isinstance(value, _NUMBER):
            return float(value)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (str(k) for k, v in self._raw.items() if isinstance(v, _NUMBER))

    def __len__(self) -> int:
        return sum(1 for v in self._raw.values() if isinstance(v, _NUMBER))

    def __repr__(self) -> str:
        return repr(dict(self))


@dataclass(frozen=True)
class StateOperatorProgress:
    """One stateful operator's figures for one batch."""

    operator_name: str
    num_rows_total: int
    num_rows_updated: int
    num_rows_removed: int
    commit_time_ms: int
    memory_used_bytes: int
    num_rows_dropped_by_watermark: int
    num_state_store_instances: int
    num_shuffle_partitions: int
    all_updates_time_ms: int
    all_removals_time_ms: int
    custom_metrics: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StateOperatorProgress:
        """Build from one element of the progress JSON's stateOperators list."""
        custom = data.get("customMetrics") or {}
        return cls(
            operator_name=str(data.get("operatorName", "")),
            num_rows_total=_int(data, "numRowsTotal"),
            num_rows_updated=_int(data, "numRowsUpdated"),
            num_rows_removed=_int(data, "numRowsRemoved"),
            commit_time_ms=_int(data, "commitTimeMs"),
            memory_used_bytes=_int(data, "memoryUsedBytes"),
            num_rows_dropped_by_watermark=_int(data, "numRowsDroppedByWatermark"),
            num_state_store_instances=_int(data, "numStateStoreInstances"),
            num_shuffle_partitions=_int(data, "numShufflePartitions"),
            all_updates_time_ms=_int(data, "allUpdatesTimeMs"),
            all_removals_time_ms=_int(data, "allRemovalsTimeMs"),
            custom_metrics=NumericMetrics(custom) if isinstance(custom, Mapping) else {},
        )

    @property
    def rows_untracked(self) -> bool:
        """True when this batch shows numRowsTotal is not counted: a RocksDB store (trackTotalNumberOfRows off)
        reports 0 rows in state right after it updated rows and removed none."""
        rocksdb = any(key.startswith("rocksdb") for key in self.custom_metrics)
        return rocksdb and self.num_rows_total == 0 and self.num_rows_updated > 0 and self.num_rows_removed == 0


@dataclass(frozen=True)
class BatchProgress:
    """One micro-batch's progress, as Spark reported it."""

    query_id: str
    run_id: str
    name: str | None
    batch_id: int
    timestamp: datetime | None
    batch_duration_ms: int
    num_input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    duration_ms: Mapping[str, int]
    event_time: Mapping[str, str]
    state_operators: tuple[StateOperatorProgress, ...]
    observed_metrics: Mapping[str, Any]
    raw: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchProgress:
        """Build from Spark's progress JSON (json.loads(progress.json))."""
        durations = data.get("durationMs") or {}
        return cls(
            query_id=str(data.get("id", "")),
            run_id=str(data.get("runId", "")),
            name=data.get("name"),
            batch_id=_int(data, "batchId"),
            timestamp=parse_spark_time(data.get("timestamp")),
            batch_duration_ms=_int(data, "batchDuration") or int(durations.get("triggerExecution", 0) or 0),
            num_input_rows=_int(data, "numInputRows"),
            input_rows_per_second=_float(data, "inputRowsPerSecond"),
            processed_rows_per_second=_float(data, "processedRowsPerSecond"),
            duration_ms={str(k): int(v) for k, v in durations.items() if isinstance(v, _NUMBER)},
            event_time={str(k): str(v) for k, v in (data.get("eventTime") or {}).items()},
            state_operators=tuple(StateOperatorProgress.from_json(op) for op in data.get("stateOperators") or ()),
            observed_metrics=data.get("observedMetrics") or {},
            raw=data,
        )

    @property
    def watermark(self) -> datetime | None:
        """The event-time watermark used by this batch (None before the first event)."""
        value = parse_spark_time(self.event_time.get("watermark"))
        if value is not None and value.timestamp() <= 0:
            return None
        return value

    @property
    def max_event_time(self) -> datetime | None:
        """The newest event time seen in this batch."""
        return parse_spark_time(self.event_time.get("max"))

    @property
    def state_rows(self) -> int:
        """State rows summed over operators."""
        return sum(op.num_rows_total for op in self.state_operators)

    @property
    def state_rows_untracked(self) -> bool:
        """True when an operator's numRowsTotal is shown not to be counted (StateOperatorProgress.rows_untracked)."""
        return any(op.rows_untracked for op in self.state_operators)

    @property
    def state_memory_bytes(self) -> int:
        """State memory summed over operators."""
        return sum(op.memory_used_bytes for op in self.state_operators)

    @property
    def source_lag(self) -> list[PartitionLag]:
        """Per-partition lag of its Kafka sources after this batch (endOffset against latestOffset); [] for others."""
        return source_lags(self.raw)

    @property
    def source_lag_total(self) -> int | None:
        """Records not yet read over every Kafka partition after this batch; None for other sources."""
        lags = self.source_lag
        return sum(lag.lag for lag in lags) if lags else None

    @property
    def rows_dropped_by_watermark(self) -> int:
        """Late rows the stateful operators dropped in this batch."""
        return sum(op.num_rows_dropped_by_watermark for op in self.state_operators)
