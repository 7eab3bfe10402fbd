"""The source side of a recovery: how far the landing data reaches, and how the source is replayed."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.compat import UTC
from tidemark.config import SourceFormat, TidemarkConfig
from tidemark.errors import UsageError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check_replayable(config: TidemarkConfig) -> None:
    """Recovery replays by event time: a file landing folder or Kafka, and a window aggregation."""
    if config.source.format is SourceFormat.RATE:
        msg = "the rate source cannot be replayed: tidemark recover needs a file landing folder or Kafka"
        raise UsageError(msg)
    if config.aggregation.kind.value != "window" or "windowStart" not in config.partition_by:
        msg = (
            "tidemark recover needs a window aggregation whose sink is partitioned by windowStart "
            "(the resume point is read from those partitions)"
        )
        raise UsageError(msg)


def newest_landing_event(spark: SparkSession, config: TidemarkConfig) -> datetime | None:
    """The newest valid event time in the landing files (a batch scan), None for Kafka or no data."""
    if not config.source.is_file:
        return None
    from pyspark.sql import functions as F

    from tidemark.pipeline.quarantine import event_time_expression
    from tidemark.pipeline.sources import check_source_path, parse_schema

    check_source_path(config)
    source = config.source
    schema = parse_schema(source.schema_ddl or "")
    reader = spark.read.format(source.format.value).schema(schema)
    if source.format is SourceFormat.CSV:
        reader = reader.option("header", "true")
    for key, value in source.options.items():
        reader = reader.option(key, str(value))
    frame = reader.load(source.path)
    types = dict(frame.dtypes)
    column = event_time_expression(config, types[config.event_time.column])
    row = frame.select(F.max(column).alias("newest")).first()
    newest = row["newest"] if row is not None else None
    if newest is None:
        return None
    assert isinstance(newest, datetime)
    # Spark hands back naive datetimes in the driver's local zone; convert through the epoch.
    return datetime.fromtimestamp(newest.timestamp(), tz=UTC) if newest.tzinfo is None else newest.astimezone(UTC)


_START_OPTIONS = ("startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy")


def replay_config(config: TidemarkConfig, resume_from: datetime, source_offsets: str | None = None) -> TidemarkConfig:
    """The config the replay query runs with: for Kafka, the plan's per-partition start offsets (or the earliest)."""
    del resume_from  # the replay filter goes to the query itself (replay_from)
    if not config.source.is_kafka:
        return config
    options = {k: v for k, v in config.source.options.items() if k not in _START_OPTIONS}
    source = config.source.model_copy(update={"options": options, "starting_offsets": source_offsets or "earliest"})
    return config.model_copy(update={"source": source})


def describe_replay(config: TidemarkConfig, resume_from: datetime) -> str:
    """One line saying from where the source is replayed (a Kafka plan says it with its start offsets)."""
    column = config.event_time.column
    when = resume_from.isoformat()
    if config.source.is_kafka:
        subscription = config.source.subscription
        return f"Kafka {subscription} from per-partition start offsets, keeping events with {column} >= {when}"
    return f"every landing file in {config.source.path}, keeping events with {column} >= {when}"
