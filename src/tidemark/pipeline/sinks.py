"""The sink: Parquet partitioned by window start, append mode, checkpointed (or the console)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config import SinkFormat, TidemarkConfig, TriggerMode
from tidemark.durations import spark_interval

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter


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
