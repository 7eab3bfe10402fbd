"""The sink: Parquet partitioned by window start, append mode, checkpointed (or the console)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config import AggregationKind, SinkFormat, TidemarkConfig, TriggerMode
from tidemark.durations import spark_interval

DYNAMIC_ALLOCATION_KEY = "spark.dynamicAllocation.enabled"

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter


def output_writers(config: TidemarkConfig, task_slots: int) -> int | None:
    """How many tasks run the stage that writes a batch's Parquet output; None leaves Spark's plan.

    Each writing task writes one file into every output partition its rows fall in, so with Spark's plan a
    batch that closes windows writes (state partitions x windows) small files, and the batch that emits a
    caught-up backlog spends most of its time opening and closing them. Window and session aggregations
    write through `coalesce` instead: `[sink] writers` tasks, by default one per task slot (a coalesce never
    adds partitions). Coalesce is narrow, so the whole stage after the shuffle (state restore, merge, state
    save, write) runs in that many tasks. Under dynamic allocation the slots are not known at start: Spark's
    plan stays unless `writers` is set. Per-key logic (kind "custom") keeps Spark's plan: its state operator
    runs Python workers per partition, which this has not been verified with.
    """
    if config.sink.format is not SinkFormat.PARQUET or config.aggregation.kind is AggregationKind.CUSTOM:
        return None
    if config.sink.writers is not None:
        return config.sink.writers
    if str(config.spark_conf().get(DYNAMIC_ALLOCATION_KEY, "false")).lower() == "true":
        return None
    return max(1, task_slots)


def writer_for(output: DataFrame, config: TidemarkConfig, available_now: bool) -> DataStreamWriter:
    """Configure the streaming writer: sink, checkpoint, trigger, query name."""
    writer = (
        output.writeStream.queryName(config.pipeline.name)
        .outputMode("append")
        .option("checkpointLocation", config.checkpoint.location)
    )
    if config.sink.format is SinkFormat.PARQUET:
        writer = writer.format("parquet").option("path", config.sink.path or "")
        if config.partition_by:
            writer = writer.partitionBy(*config.partition_by)
        if config.sink.retention:
            writer = writer.option("retention", config.sink.retention)
    else:
        writer = writer.format("console").option("truncate", "false")
    if available_now or config.trigger.mode is TriggerMode.AVAILABLE_NOW:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=spark_interval(config.trigger.interval))
