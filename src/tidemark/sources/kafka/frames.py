"""Kafka's records as the pipeline's rows: the JSON value parsed by the source schema, beside the record's own
fields, as a stream or (one committed batch read again) as a batch of an offset range."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidemark.config import TidemarkConfig
from tidemark.errors import ConfigError, EnvironmentProblem
from tidemark.sources.base import CORRUPT_COLUMN, SOURCE_FILE_COLUMN, RawStream, parse_schema
from tidemark.spark.lines import kafka_package

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The Kafka record's own fields, beside the JSON value's columns (the aggregation and event time may use them).
KAFKA_COLUMNS = ("kafka_key", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")


def kafka_missing() -> str:
    """The one line for a Kafka source without Spark's Kafka connector on the classpath."""
    return (
        "the Kafka source needs Spark's Kafka connector, which is not on the classpath: add "
        f'spark.jars.packages = "{kafka_package()}" under [spark.conf] (or --packages with spark-submit)'
    )


def kafka_options(config: TidemarkConfig, start: str | None = None, end: str | None = None) -> dict[str, str]:
    """The options Spark's Kafka source gets: the stream's, or (end given) one batch's offset range.

    They hold the source's secrets (read from the environment or files now): never log or show them.
    """
    from tidemark.sources.kafka.options import kafka_access

    access = kafka_access(config)
    return access.spark_options() if end is None else access.batch_options(start, end)


def kafka_frame(spark: SparkSession, config: TidemarkConfig, options: dict[str, str], batch: bool) -> RawStream:
    """Spark's Kafka source with these options, its values parsed; a value that is not JSON is malformed."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    schema = parse_schema(config.source.schema_ddl or "")
    clash = [c for c in KAFKA_COLUMNS if c in schema.fieldNames()]
    if clash:
        msg = f"source.schema names {clash[0]!r}, which tidemark gives the Kafka record's own field: rename it"
        raise ConfigError(msg)
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT_COLUMN, StringType(), True)])
    reader: Any = (spark.read if batch else spark.readStream).format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    try:
        raw = reader.load()
    except Exception as exc:
        if "kafka" in str(exc).lower() and "data source" in str(exc).lower():
            raise EnvironmentProblem(kafka_missing()) from exc
        raise
    line = F.col("value").cast("string")
    parsed = F.from_json(line, with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN})
    origin = F.concat_ws("/", F.col("topic"), F.col("partition").cast("string"), F.col("offset").cast("string"))
    frame = raw.select(
        parsed.alias("r"),
        line.alias("_line"),
        origin.alias(SOURCE_FILE_COLUMN),
        F.col("key").cast("string").alias("kafka_key"),
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
    ).select("r.*", "_line", SOURCE_FILE_COLUMN, *KAFKA_COLUMNS)
    # A value that is not JSON, or null (a tombstone), is malformed whatever the schema's columns allow.
    unparseable = F.col(CORRUPT_COLUMN).isNotNull() | F.col("_line").isNull()
    raw_line = F.when(unparseable, F.coalesce(F.col("_line"), F.lit("")))
    return RawStream(frame, (*schema.fieldNames(), *KAFKA_COLUMNS), raw_line, F.col(SOURCE_FILE_COLUMN))


def read_kafka_range(spark: SparkSession, config: TidemarkConfig, start: str | None, end: str) -> RawStream:
    """One micro-batch of a Kafka source read again as a batch (offset JSON as in the offset log)."""
    return kafka_frame(spark, config, kafka_options(config, start, end), batch=True)
