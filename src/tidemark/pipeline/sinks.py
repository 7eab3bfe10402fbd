"""The streaming writer of a pipeline: its query name, checkpoint and trigger, pointed at the config's sink."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig, TriggerMode
from tidemark.durations import spark_interval
from tidemark.sinks import sink_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter


def output_writers(config: TidemarkConfig, task_slots: int) -> int | None:
    """How many tasks run the stage that writes a batch's output; None leaves Spark's plan (sinks/parquet.py)."""
    return sink_of(config).writers(task_slots)


def writer_for(output: DataFrame, config: TidemarkConfig, available_now: bool) -> DataStreamWriter:
    """Configure the streaming writer: sink, checkpoint, trigger, query name."""
    writer = (
        output.writeStream.queryName(config.pipeline.name)
        .outputMode("append")
        .option("checkpointLocation", config.checkpoint.location)
    )
    writer = sink_of(config).configure(writer, output)
    if available_now or config.trigger.mode is TriggerMode.AVAILABLE_NOW:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=spark_interval(config.trigger.interval))
