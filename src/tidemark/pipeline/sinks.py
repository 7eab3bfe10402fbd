"""The streaming writer of a pipeline: its query name, checkpoint and trigger, pointed at the config's sink."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config import TriggerMode
from tidemark.context import PipelineContext
from tidemark.durations import spark_interval

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter


def output_writers(pipeline: PipelineContext, task_slots: int) -> int | None:
    """How many tasks run the stage that writes a batch's output; None leaves Spark's plan (sinks/parquet.py)."""
    return pipeline.sink.writers(task_slots)


def writer_for(output: DataFrame, pipeline: PipelineContext, available_now: bool) -> DataStreamWriter:
    """Configure the streaming writer: sink, checkpoint, trigger, query name."""
    config = pipeline.config
    writer = (
        output.writeStream.queryName(config.pipeline.name)
        .outputMode("append")
        .option("checkpointLocation", config.checkpoint.location)
    )
    writer = pipeline.sink.configure(writer, output)
    if available_now or config.trigger.mode is TriggerMode.AVAILABLE_NOW:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=spark_interval(config.trigger.interval))
