"""Tumbling and sliding event-time windows per key: one final row per (key, window)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.durations import spark_interval

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

OUTPUT_COLUMNS = ("windowStart", "windowEnd", "firstEventTime", "lastEventTime", "count")


def _extra(function: str, column: str) -> Column:
    from pyspark.sql import functions as F

    col = F.col(column)
    aggregates = {
        "sum": F.sum,
        "avg": F.avg,
        "min": F.min,
        "max": F.max,
        "approx_count_distinct": F.approx_count_distinct,
        "first": F.first,
        "last": F.last,
    }
    if function == "count_distinct":
        return F.count_distinct(col)
    return aggregates[function](col)


def build(events: DataFrame, config: TidemarkConfig) -> DataFrame:
    """Group watermarked events by key and window; emit windows once the watermark passes their end."""
    from pyspark.sql import functions as F

    agg = config.aggregation
    assert agg.window is not None
    time_column = config.event_time.column
    slide = spark_interval(agg.slide) if agg.slide else None
    window = F.window(time_column, spark_interval(agg.window), slide)
    extras = [_extra(e.function, e.column).alias(e.output_name) for e in agg.extra]
    grouped = events.groupBy(*agg.key, window.alias("window")).agg(
        F.min(time_column).alias("firstEventTime"),
        F.max(time_column).alias("lastEventTime"),
        F.count(F.lit(1)).alias("count"),
        *extras,
    )
    return grouped.select(
        *agg.key,
        F.col("window.start").alias("windowStart"),
        F.col("window.end").alias("windowEnd"),
        "firstEventTime",
        "lastEventTime",
        "count",
        *[e.output_name for e in agg.extra],
    )
