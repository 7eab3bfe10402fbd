"""Spark's rate source: generated rows, for demos and load tests (nothing to replay, nothing malformed)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from tidemark.config import SourceFormat
from tidemark.sources.base import RawStream, ReplayStart, Source

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

    def replay_start(self, spark: SparkSession, resume_from: Callable[[], datetime]) -> ReplayStart:
        del spark, resume_from
        self.require_replayable()
        raise AssertionError  # require_replayable raised

    def newest_event(self, spark: SparkSession, start: ReplayStart) -> datetime | None:
        del spark, start
        return None

    def describe_replay(self, resume_from: datetime, start: ReplayStart | None) -> str:
        del start
        return f"the rate source cannot be replayed ({self._keeping(resume_from)})"
