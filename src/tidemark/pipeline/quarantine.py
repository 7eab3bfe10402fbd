"""Malformed records: counted in the stream's own scan (observe), written per batch by the executors.

The stream's observation carries only a count and one sample record, so the driver and the progress
log stay small however many rows are malformed. Once a batch has committed, its malformed records are
written from the input the checkpoint says that batch read (the files of a file source, the offset
range of a Kafka source): up to DRIVER_LIMIT records as one JSON-lines file through tidemark's own
storage layer, more by Spark's executors as a folder of JSON part files. Either is rewritten whole if
a crash interrupts it, so each batch is quarantined exactly once; the marker `_last_batch` says up to
which batch that is done.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.compat import UTC
from tidemark.config import TidemarkConfig
from tidemark.errors import ConfigError
from tidemark.formats import QUARANTINE_DONE_FILE, QUARANTINE_SUFFIX, quarantine_batch, quarantine_batch_name
from tidemark.sources import event_time_expression
from tidemark.storage import Storage, open_storage

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from tidemark.context import PipelineContext
    from tidemark.sources import RawStream, Source

OBSERVATION = "tidemark_quarantine"
RECORDS = "records"
# A Kafka batch's malformed records ride in the stream's own observation up to this many characters of JSON (about
# 20,000 records of 200 B); past it none do and the batch is re-read. Spark keeps the newest progress events on
# the driver (spark.sql.streaming.numRecentProgressUpdates, which tidemark's runs lower to RECENT_PROGRESS).
INLINE_CHARS = 4 * 1024 * 1024
RECENT_PROGRESS = 10
REASON_UNPARSEABLE = "unparseable record"
REASON_EVENT_TIME = "missing or invalid event time"
REASON_KEY = "missing key"


@dataclass(frozen=True)
class ValidatedStream:
    """Good events (event time cast, watermark applied) after malformed ones were taken aside."""

    events: DataFrame
    columns: tuple[str, ...]


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


def validate(stream: RawStream, pipeline: PipelineContext) -> ValidatedStream:
    """Split malformed rows off into an observation and return the good events with a watermark."""
    from pyspark.sql import functions as F

    config = pipeline.config
    checks = _checks(stream, config)
    records = _inline_records(stream, pipeline.source, checks)
    observed = checks.frame.observe(
        OBSERVATION,
        F.count(F.when(checks.bad, 1)).alias("count"),
        # One sample, never the rows: a batch of millions of malformed rows must not reach the driver.
        F.max(F.when(checks.bad, checks.record)).alias("sample"),
        *([records.alias(RECORDS)] if records is not None else []),
    )
    good = observed.where(~checks.bad).select(
        *[F.col("_event_time").alias(c) if c == config.event_time.column else F.col(c) for c in stream.columns]
    )
    watermarked = good.withWatermark(config.event_time.column, _interval(config))
    return ValidatedStream(watermarked, stream.columns)


def _inline_records(stream: RawStream, source: Source, checks: _Checks) -> Column | None:
    """The bounded aggregate of a batch's malformed records as JSON, when the session's driver has it.

    Only for a source whose record's origin (Kafka's topic/partition/offset) names it alone, so the driver can drop
    the copies a retried task adds and check the rest against the count. A file source's rows carry only their
    file's name.
    """
    from pyspark.sql import functions as F

    from tidemark.spark.jvm import bounded_collect

    if not source.origin_names_record:
        return None
    return bounded_collect(stream.frame.sparkSession, F.when(checks.bad, F.to_json(checks.record)), INLINE_CHARS)


def malformed_frame(stream: RawStream, config: TidemarkConfig, batch_id: int) -> DataFrame:
    """The quarantine records of a batch re-read from its input, in the written layout."""
    from pyspark.sql import functions as F

    checks = _checks(stream, config)
    return (
        checks.frame.where(checks.bad)
        .select(checks.record.alias("r"))
        .select(
            F.lit(batch_id).cast("long").alias("batch_id"),
            F.col("r.source").alias("source"),
            F.col("r.reason").alias("reason"),
            F.col("r.raw").alias("raw"),
            F.date_format(F.current_timestamp(), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias("quarantined_at"),
        )
    )


def newest_event_ms(stream: RawStream, config: TidemarkConfig) -> int | None:
    """The newest event time among the rows that are not malformed, in epoch ms as Spark's watermark counts it
    (microseconds // 1000); None when there is none."""
    from pyspark.sql import functions as F

    checks = _checks(stream, config)
    row = checks.frame.where(~checks.bad).agg(F.max(F.expr("unix_micros(_event_time)")).alias("newest")).first()
    value = row["newest"] if row is not None else None
    return None if value is None else int(value) // 1000


def _interval(config: TidemarkConfig) -> str:
    from tidemark.durations import spark_interval

    return spark_interval(config.event_time.watermark)


@dataclass(frozen=True)
class QuarantinedBatch:
    """Malformed records of one batch, as written."""

    batch_id: int
    count: int
    path: str | None


batch_name = quarantine_batch_name  # the file a batch's malformed records go to (formats/ owns the name)


def _observation(observed: dict[str, Any] | None) -> dict[str, Any] | None:
    """The quarantine observation of one progress event's observedMetrics, as a dict (JSON or a Row)."""
    value = observed.get(OBSERVATION) if observed else None
    if value is None:
        return None
    return value if isinstance(value, dict) else value.asDict(recursive=True)


def rows_of(observed: dict[str, Any] | None) -> tuple[int, list[dict[str, Any]]]:
    """The count and the sample record(s) of the quarantine observation in one progress event's observedMetrics."""
    data = _observation(observed)
    if data is None:
        return 0, []
    sample = data.get("sample")
    rows = [sample if isinstance(sample, dict) else sample.asDict(recursive=True)] if sample else []
    return int(data.get("count") or 0), rows


def inline_records(observed: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """Every malformed record of a batch from its observation, or None when they were not carried (too many, or a
    session without tidemark's JVM helper)."""
    data = _observation(observed)
    text = data.get(RECORDS) if data is not None else None
    if not isinstance(text, str):
        return None
    records = json.loads(text)
    return records if isinstance(records, list) else None


def unique_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records once each by their source (a retried task's observation adds its rows again), in source order."""
    return list({str(r.get("source")): r for r in sorted(records, key=lambda r: str(r.get("source")))}.values())


# Up to this many records a batch's quarantine is collected to the driver and written as one file through
# tidemark's storage layer (any URI); beyond it Spark's executors write it (a folder of part files).
DRIVER_LIMIT = 10_000


# Spark's take (a limit collected to the driver) reads one input partition first and more only if it found too
# few rows: with a batch's records spread evenly that is one core reading while the others wait, then a second
# job. When the stream's own count says the records fit, every partition is read at once instead.
_TAKE_ALL_AT_ONCE = {"spark.sql.limit.initialNumPartitions": "100000"}


def write_malformed(
    frame: DataFrame, quarantine_dir: str, batch_id: int, expected: int | None = None
) -> QuarantinedBatch:
    """Write one batch's records (idempotent: a rerun replaces what a crash left half written).

    expected: how many the stream counted in this batch (None: not known, as at a start that finishes an earlier
    run's batches). More than DRIVER_LIMIT go straight to the executors, without a collect that would read the
    input once more only to find it too large; fewer are collected in one job over every input partition.
    """
    from tidemark.session import runtime_conf

    store = open_storage(quarantine_dir)
    folder = batch_name(batch_id).removesuffix(QUARANTINE_SUFFIX)
    if expected is None or expected <= DRIVER_LIMIT:
        # Still capped: the input could have changed since the stream counted it (a file rewritten in place).
        with runtime_conf(frame.sparkSession, _TAKE_ALL_AT_ONCE if expected is not None else {}):
            rows = frame.limit(DRIVER_LIMIT + 1).collect()
        if len(rows) <= DRIVER_LIMIT:
            return write_batch(quarantine_dir, batch_id, [r.asDict(recursive=True) for r in rows])
    if store.exists(batch_name(batch_id)):
        store.delete(batch_name(batch_id))
    frame.write.mode("overwrite").json(store.uri(folder))
    count = sum(1 for _ in _folder_lines(store, folder))
    return QuarantinedBatch(batch_id, count, store.uri(folder))


def quarantine_time(moment: datetime) -> str:
    """A record's quarantined_at as the executors write it (`yyyy-MM-dd'T'HH:mm:ss.SSSXXX` in the session's UTC:
    milliseconds and Z), so a file source's folder and a Kafka batch's carried records read alike."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_batch(quarantine_dir: str, batch_id: int, rows: list[dict[str, Any]]) -> QuarantinedBatch:
    """Write a batch's malformed records atomically as one file (rewriting the same batch is idempotent)."""
    store = open_storage(quarantine_dir)
    for entry in list(store.list_files(batch_name(batch_id).removesuffix(QUARANTINE_SUFFIX))):
        store.delete(entry.rel)  # the executors' bigger write of the same batch, before a crash
    if not rows:
        return QuarantinedBatch(batch_id, 0, None)
    now = quarantine_time(datetime.now(tz=UTC))
    lines = []
    for row in rows:
        record = {
            "batch_id": batch_id,
            "source": row.get("source"),
            "reason": row.get("reason"),
            "raw": row.get("raw"),
            "quarantined_at": row.get("quarantined_at") or now,
        }
        lines.append(json.dumps(record) + "\n")
    name = batch_name(batch_id)
    store.write_atomic(name, "".join(lines).encode("utf-8"))
    return QuarantinedBatch(batch_id, len(rows), store.uri(name))


def _folder_lines(store: Storage, folder: str) -> Iterator[bytes]:
    """The lines of a batch folder Spark wrote, only once its job committed (a `_SUCCESS` file)."""
    if not store.exists(f"{folder}/{QUARANTINE_DONE_FILE}"):
        return
    for entry in sorted(store.list_files(folder), key=lambda e: e.rel):
        name = entry.rel.rsplit("/", 1)[-1]
        if name.startswith(("_", ".")) or name.endswith(".crc"):
            continue
        with store.open_read(entry.rel) as handle:
            for line in handle:
                if line.strip():
                    yield line


def iter_quarantine(quarantine_dir: str) -> Iterator[dict[str, Any]]:
    """Every quarantined record written so far, batch order (streamed: a batch can hold millions)."""
    store = open_storage(quarantine_dir)
    listing = store.list_dir("")
    if listing is None:
        return
    files = {n for n, _ in listing.files if quarantine_batch(n) is not None}
    folders = {n for n in listing.dirs if quarantine_batch(n) is not None}
    for name in sorted(files | folders):
        if name in folders:
            yield from (json.loads(line) for line in _folder_lines(store, name))
            continue
        with store.open_read(name) as handle:
            yield from (json.loads(line) for line in handle if line.strip())


def read_quarantine(quarantine_dir: str) -> list[dict[str, Any]]:
    """Every quarantined record written so far, batch order."""
    return list(iter_quarantine(quarantine_dir))
