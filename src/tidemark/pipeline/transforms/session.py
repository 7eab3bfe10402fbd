"""Per-key sessions ([aggregation] kind = "session"): one final row per session once the watermark passes its end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.compat import StrEnum
from tidemark.config import TidemarkConfig
from tidemark.durations import spark_interval

if TYPE_CHECKING:
    from datetime import timedelta

    from pyspark.sql import DataFrame

OUTPUT_COLUMNS = ("sessionStart", "sessionEnd", "count", "firstEventTime", "lastEventTime")


class SessionEngine(StrEnum):
    """What computes the sessions: Spark's session_window aggregation, or tidemark's lifecycle layer."""

    NATIVE = "native"
    LIFECYCLE = "lifecycle"


# Chosen by benchmarks/sessions.py (docs/benchmarks/sessions.md): both give the same rows.
DEFAULT_ENGINE = SessionEngine.NATIVE


def build(events: DataFrame, config: TidemarkConfig, engine: SessionEngine = DEFAULT_ENGINE) -> DataFrame:
    """Group watermarked events into per-key sessions; sessionEnd = last event + gap."""
    agg = config.aggregation
    assert agg.gap is not None
    if engine is SessionEngine.LIFECYCLE:
        return build_lifecycle(events, agg.key, config.event_time.column, agg.gap)
    return build_native(events, agg.key, config.event_time.column, agg.gap)


def build_native(events: DataFrame, keys: list[str], time_column: str, gap: timedelta) -> DataFrame:
    """Sessions with Spark's session_window: its state of a session is dropped when the session is emitted."""
    from pyspark.sql import functions as F

    grouped = events.groupBy(*keys, F.session_window(time_column, spark_interval(gap)).alias("session")).agg(
        F.count(F.lit(1)).alias("count"),
        F.min(time_column).alias("firstEventTime"),
        F.max(time_column).alias("lastEventTime"),
    )
    return grouped.select(
        *keys,
        F.col("session.start").alias("sessionStart"),
        F.col("session.end").alias("sessionEnd"),
        "count",
        "firstEventTime",
        "lastEventTime",
    )


def build_lifecycle(events: DataFrame, keys: list[str], time_column: str, gap: timedelta) -> DataFrame:
    """Sessions with tidemark's SessionProcessor on transformWithStateInPandas (the RocksDB store is needed)."""
    from tidemark.spark.lines import Feature, require

    require(Feature.TRANSFORM_WITH_STATE_PANDAS)  # before the import: Spark 3.5 has no stateful_processor module
    from tidemark.stateful.lifecycle import apply_processor
    from tidemark.stateful.sessions import SessionProcessor

    key_ddl = [events.schema[name].dataType.simpleString() for name in keys]
    processor = SessionProcessor(keys, key_ddl, gap, time_column)
    return apply_processor(events, processor, keys, time_column)
