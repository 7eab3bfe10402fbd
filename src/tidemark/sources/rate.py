"""Spark's rate source: generated rows, for demos and load tests (nothing to replay, nothing malformed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tidemark.config import SourceFormat
from tidemark.sources.base import RawStream, Source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class RateSource(Source):
    """`rows_per_second` rows a second over `rate_keys` keys, stamped with the time they were generated."""

    formats: ClassVar[frozenset[SourceFormat]] = frozenset({SourceFormat.RATE})
    malformed: ClassVar[bool] = False
    replay_refusal: ClassVar[str | None] = (
        "the rate source cannot be replayed: tidemark recover needs a file landing folder or Kafka"
    )

    def stream(self, spark: SparkSession) -> RawStream:
        from pyspark.sql import functions as F

        config = self.config
        key = config.aggregation.key[0]
        event_column = config.event_time.column
        frame = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", config.source.rows_per_second)
            .load()
            .select(
                F.concat(F.lit("k"), (F.col("value") % config.source.rate_keys).cast("string")).alias(key),
                F.col("timestamp").alias(event_column),
                F.col("value").cast("double").alias("value"),
            )
        )
        return RawStream(frame, (key, event_column, "value"), None, F.lit("rate"))
