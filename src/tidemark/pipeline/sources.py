"""Streaming sources: a landing folder of JSON/CSV/Parquet files, the rate source, or Kafka."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.config import SourceFormat, TidemarkConfig
from tidemark.errors import ConfigError, EnvironmentProblem, SourceError
from tidemark.schema import parse_ddl
from tidemark.spark.lines import kafka_package

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

CORRUPT_COLUMN = "_corrupt_record"
SOURCE_FILE_COLUMN = "_source_file"


def kafka_missing() -> str:
    """The one line for a Kafka source without Spark's Kafka connector on the classpath."""
    return (
        "the Kafka source needs Spark's Kafka connector, which is not on the classpath: add "
        f'spark.jars.packages = "{kafka_package()}" under [spark.conf] (or --packages with spark-submit)'
    )


@dataclass(frozen=True)
class RawStream:
    """The source's streaming DataFrame and what the quarantine needs to know of it."""

    frame: DataFrame
    columns: tuple[str, ...]  # the user's columns, in schema order
    raw_line: Column | None  # the raw input line where the source keeps it (malformed rows)
    origin: Column  # where a record came from: file path, or topic/partition/offset


def parse_schema(ddl: str) -> StructType:
    """Parse the config's DDL schema, or raise a ConfigError naming the problem."""
    try:
        return parse_ddl(ddl)
    except ValueError as exc:
        msg = f"source.schema: {exc} (e.g. 'user STRING, ts STRING, value DOUBLE')"
        raise ConfigError(msg) from exc


def check_source_path(config: TidemarkConfig) -> None:
    """Fail with one line when a local landing folder does not exist, or a Kafka source's secret is missing."""
    if config.source.is_kafka:
        from tidemark.kafka.options import kafka_access

        kafka_access(config)  # reads the connection string or secret options: a missing one is named now
        return
    path = config.source.path
    if config.source.is_file and path and "://" not in path and not Path(path).exists():
        msg = f"source.path {path} does not exist: create the landing folder or fix [source] path"
        raise SourceError(msg)


def _file_stream(spark: SparkSession, config: TidemarkConfig, files: list[str] | None = None) -> RawStream:
    """The landing folder as a stream, or (files given) those files as one batch, parsed the same way."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    source = config.source
    schema = parse_schema(source.schema_ddl or "")
    columns = tuple(schema.fieldNames())
    reader: Any = (spark.read if files is not None else spark.readStream).format(source.format.value)
    keeps_raw = source.format in (SourceFormat.JSON, SourceFormat.CSV)
    if keeps_raw:
        schema = StructType([*schema.fields, StructField(CORRUPT_COLUMN, StringType(), True)])
        reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
    if source.format is SourceFormat.CSV:
        reader = reader.option("header", "true")
    if source.max_files_per_trigger and files is None:
        reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
    for key, value in source.options.items():
        reader = reader.option(key, str(value))
    reader = reader.schema(schema)
    frame = reader.load(files) if files is not None else reader.load(source.path)
    frame = frame.withColumn(SOURCE_FILE_COLUMN, F.col("_metadata.file_path"))
    return RawStream(frame, columns, F.col(CORRUPT_COLUMN) if keeps_raw else None, F.col(SOURCE_FILE_COLUMN))


def read_files(spark: SparkSession, config: TidemarkConfig, files: list[str]) -> RawStream:
    """Read given landing files as a batch, exactly as the stream parses them (for quarantine reconciliation)."""
    return _file_stream(spark, config, files)


def _rate_stream(spark: SparkSession, config: TidemarkConfig) -> RawStream:
    from pyspark.sql import functions as F

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


# The Kafka record's own fields, beside the JSON value's columns (the aggregation and event time may use them).
KAFKA_COLUMNS = ("kafka_key", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")


def kafka_options(config: TidemarkConfig, start: str | None = None, end: str | None = None) -> dict[str, str]:
    """The options Spark's Kafka source gets: the stream's, or (end given) one batch's offset range.

    They hold the source's secrets (read from the environment or files now): never log or show them.
    """
    from tidemark.kafka.options import kafka_access

    access = kafka_access(config)
    return access.spark_options() if end is None else access.batch_options(start, end)


def _kafka_frame(spark: SparkSession, config: TidemarkConfig, options: dict[str, str], batch: bool) -> RawStream:
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


def _kafka_stream(spark: SparkSession, config: TidemarkConfig) -> RawStream:
    return _kafka_frame(spark, config, kafka_options(config), batch=False)


def read_kafka_range(spark: SparkSession, config: TidemarkConfig, start: str | None, end: str) -> RawStream:
    """One micro-batch of a Kafka source read again as a batch (offset JSON as in the offset log)."""
    return _kafka_frame(spark, config, kafka_options(config, start, end), batch=True)


def read_stream(spark: SparkSession, config: TidemarkConfig) -> RawStream:
    """Open the configured source as a streaming DataFrame."""
    check_source_path(config)
    if config.source.is_file:
        return _file_stream(spark, config)
    if config.source.format is SourceFormat.RATE:
        return _rate_stream(spark, config)
    return _kafka_stream(spark, config)
