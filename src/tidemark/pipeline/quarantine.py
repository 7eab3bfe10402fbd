"""Malformed records: found in the same scan (observe), written per batch with raw line, file and batch id."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tidemark.config import TidemarkConfig
from tidemark.errors import ConfigError
from tidemark.storage import open_storage

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from tidemark.pipeline.sources import RawStream

OBSERVATION = "tidemark_quarantine"
REASON_UNPARSEABLE = "unparseable record"
REASON_EVENT_TIME = "missing or invalid event time"
REASON_KEY = "missing key"


@dataclass(frozen=True)
class ValidatedStream:
    """Good events (event time cast, watermark applied) after malformed ones were taken aside."""

    events: DataFrame
    columns: tuple[str, ...]


def event_time_expression(config: TidemarkConfig, data_type: str) -> Column:
    """Cast the configured event-time column to a UTC timestamp; unreadable values become null."""
    from pyspark.sql import functions as F

    column = F.col(config.event_time.column)
    if data_type in ("timestamp", "timestamp_ntz"):
        return column.cast("timestamp")
    if data_type in ("bigint", "int", "double", "float", "decimal", "smallint"):
        seconds = column.cast("double") / (1000 if config.event_time.unit == "ms" else 1)
        return F.timestamp_seconds(seconds)
    if config.event_time.format:
        return F.try_to_timestamp(column, F.lit(config.event_time.format))
    return F.try_to_timestamp(column)


@dataclass(frozen=True)
class _Checks:
    frame: DataFrame  # the source rows with the cast event time in _event_time
    bad: Column
    record: Column  # struct(raw, source, reason) of a malformed row


def _checks(stream: RawStream, config: TidemarkConfig) -> _Checks:
    """The malformed-row test and the quarantine record, shared by the stream and the reconciliation."""
    from pyspark.sql import functions as F

    types = dict(stream.frame.dtypes)
    needed = [config.event_time.column, *config.aggregation.key, *(e.column for e in config.aggregation.extra)]
    for name in needed:
        if name not in stream.columns:
            msg = f"column {name!r} is not in source.schema (columns: {', '.join(stream.columns)})"
            raise ConfigError(msg)
    event_time = event_time_expression(config, types[config.event_time.column])
    frame = stream.frame.withColumn("_event_time", event_time)
    unparseable = stream.raw_line.isNotNull() if stream.raw_line is not None else F.lit(False)
    no_time = F.col("_event_time").isNull()
    no_key = F.lit(False)
    for key in config.aggregation.key:
        no_key = no_key | F.col(key).isNull()
    reason = (
        F.when(unparseable, F.lit(REASON_UNPARSEABLE))
        .when(no_time, F.lit(REASON_EVENT_TIME))
        .otherwise(F.lit(REASON_KEY))
    )
    reconstructed = F.to_json(F.struct(*[F.col(c) for c in stream.columns]))
    raw = F.coalesce(stream.raw_line, reconstructed) if stream.raw_line is not None else reconstructed
    record = F.struct(raw.alias("raw"), stream.origin.alias("source"), reason.alias("reason"))
    return _Checks(frame, unparseable | no_time | no_key, record)


def validate(stream: RawStream, config: TidemarkConfig) -> ValidatedStream:
    """Split malformed rows off into an observation and return the good events with a watermark."""
    from pyspark.sql import functions as F

    checks = _checks(stream, config)
    observed = checks.frame.observe(
        OBSERVATION,
        F.count(F.when(checks.bad, 1)).alias("count"),
        F.collect_list(F.when(checks.bad, checks.record)).alias("rows"),
    )
    good = observed.where(~checks.bad).select(
        *[F.col("_event_time").alias(c) if c == config.event_time.column else F.col(c) for c in stream.columns]
    )
    watermarked = good.withWatermark(config.event_time.column, _interval(config))
    return ValidatedStream(watermarked, stream.columns)


def malformed_rows(stream: RawStream, config: TidemarkConfig) -> list[dict[str, Any]]:
    """The quarantine records of a batch read (reconciliation after a crash)."""
    checks = _checks(stream, config)
    rows = checks.frame.where(checks.bad).select(checks.record.alias("r")).collect()
    return [row["r"].asDict(recursive=True) for row in rows]


def _interval(config: TidemarkConfig) -> str:
    from tidemark.durations import spark_interval

    return spark_interval(config.event_time.watermark)


@dataclass(frozen=True)
class QuarantinedBatch:
    """Malformed records of one batch, as written."""

    batch_id: int
    count: int
    path: str | None


def batch_name(batch_id: int) -> str:
    """The file a batch's malformed records go to, inside the quarantine folder."""
    return f"batch-{batch_id:012d}.jsonl"


def rows_of(observed: dict[str, Any] | None) -> tuple[int, list[dict[str, Any]]]:
    """The count and rows of the quarantine observation in one progress event's observedMetrics."""
    if not observed:
        return 0, []
    value = observed.get(OBSERVATION)
    if value is None:
        return 0, []
    data = value if isinstance(value, dict) else value.asDict(recursive=True)
    rows = [r if isinstance(r, dict) else r.asDict(recursive=True) for r in data.get("rows") or []]
    return int(data.get("count") or 0), rows


def write_batch(quarantine_dir: str, batch_id: int, rows: list[dict[str, Any]]) -> QuarantinedBatch:
    """Write a batch's malformed records atomically (rewriting the same batch is idempotent)."""
    if not rows:
        return QuarantinedBatch(batch_id, 0, None)
    store = open_storage(quarantine_dir)
    now = datetime.now(tz=UTC).isoformat()
    lines = []
    for row in rows:
        record = {
            "batch_id": batch_id,
            "source": row.get("source"),
            "reason": row.get("reason"),
            "raw": row.get("raw"),
            "quarantined_at": now,
        }
        lines.append(json.dumps(record) + "\n")
    name = batch_name(batch_id)
    store.write_atomic(name, "".join(lines).encode("utf-8"))
    return QuarantinedBatch(batch_id, len(rows), store.uri(name))


MARKER = "_last_batch"


def read_marker(quarantine_dir: str) -> int | None:
    """The newest batch whose malformed records were written (or found to be none)."""
    data = open_storage(quarantine_dir).read_bytes(MARKER)
    try:
        return int(data.decode("utf-8").strip()) if data is not None else None
    except (UnicodeDecodeError, ValueError):
        return None


def write_marker(quarantine_dir: str, batch_id: int) -> None:
    """Record that every batch up to batch_id has had its malformed records written."""
    open_storage(quarantine_dir).write_atomic(MARKER, str(batch_id).encode("utf-8"))


def read_quarantine(quarantine_dir: str) -> list[dict[str, Any]]:
    """Every quarantined record written so far, batch order."""
    store = open_storage(quarantine_dir)
    listing = store.list_dir("")
    if listing is None:
        return []
    records: list[dict[str, Any]] = []
    for name in sorted(n for n, _ in listing.files if n.startswith("batch-") and n.endswith(".jsonl")):
        text = (store.read_bytes(name) or b"").decode("utf-8")
        records.extend(json.loads(line) for line in text.splitlines() if line)
    return records
