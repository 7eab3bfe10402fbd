"""Pydantic models of every config table; converters to Spark conf live beside their model."""

from __future__ import annotations

import ipaddress
import re
from datetime import timedelta
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, model_validator

from tidemark.compat import StrEnum
from tidemark.config.rocksdb import DEFAULT_BOUNDED_MEMORY_MB, rocksdb_conf
from tidemark.durations import human, parse_duration
from tidemark.errors import UsageError

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def _to_duration(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except UsageError as exc:
            raise ValueError(str(exc)) from exc
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    return value


Duration = Annotated[timedelta, BeforeValidator(_to_duration), PlainSerializer(human, return_type=str)]


def _to_bound(value: Any) -> Any:
    # TOML has no null: "unbounded" turns the cap off (each RocksDB instance its own cache, Spark's default).
    if isinstance(value, str) and value.strip().lower() in ("auto", "unbounded"):
        return None if value.strip().lower() == "unbounded" else "auto"
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 16):
        return value
    msg = 'must be "auto" (sized at every start), "unbounded", or a number of MB of at least 16'
    raise ValueError(msg)


BoundedMemory = Annotated[Literal["auto"] | int | None, BeforeValidator(_to_bound)]
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PipelineConfig(_Table):
    """[pipeline]: the name of the job, used for the query name and the run folder."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")


class SparkConfig(_Table):
    """[spark]: where and how Spark runs."""

    master: str = "local[2]"
    shuffle_partitions: int = Field(default=4, ge=1)
    driver_memory: str | None = None
    executor_memory: str | None = None
    conf: dict[str, str | int | float | bool] = Field(default_factory=dict)


class SourceFormat(StrEnum):
    """Supported source formats."""

    JSON = "json"
    CSV = "csv"
    PARQUET = "parquet"
    RATE = "rate"
    KAFKA = "kafka"


class SourceConfig(_Table):
    """[source]: a landing folder of files (the default), the rate source, or Kafka."""

    format: SourceFormat = SourceFormat.JSON
    path: str | None = None
    schema_ddl: str | None = Field(default=None, alias="schema")
    max_files_per_trigger: int | None = Field(default=None, ge=1)
    options: dict[str, str | int | float | bool] = Field(default_factory=dict)
    # Kafka / Event Hubs (Kafka endpoint)
    bootstrap_servers: str | None = None
    topic: str | None = None
    starting_offsets: str = "earliest"
    # rate source
    rows_per_second: int = Field(default=100, ge=1)
    rate_keys: int = Field(default=100, ge=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def is_file(self) -> bool:
        """True for the file formats that read a landing folder."""
        return self.format in (SourceFormat.JSON, SourceFormat.CSV, SourceFormat.PARQUET)

    @model_validator(mode="after")
    def _check(self) -> SourceConfig:
        if self.is_file:
            if not self.path:
                msg = f"source.path is required for format {self.format.value!r}"
                raise ValueError(msg)
            if not self.schema_ddl:
                msg = f"source.schema (DDL like 'user STRING, ts STRING') is required for {self.format.value!r}"
                raise ValueError(msg)
        if self.format is SourceFormat.KAFKA and not (self.bootstrap_servers and self.topic):
            msg = "source.bootstrap_servers and source.topic are required for format 'kafka'"
            raise ValueError(msg)
        return self


class EventTimeConfig(_Table):
    """[event_time]: which column holds event time and how late events may be."""

    column: str
    watermark: Duration = timedelta(minutes=10)
    format: str | None = None  # a Spark datetime pattern when the column is a string in a custom format
    unit: str = Field(default="s", pattern=r"^(s|ms)$")  # for numeric epoch columns


class AggregationKind(StrEnum):
    """What the stateful step does."""

    WINDOW = "window"
    SESSION = "session"
    CUSTOM = "custom"


_AGG_FUNCTIONS = ("sum", "avg", "min", "max", "count_distinct", "approx_count_distinct", "first", "last")


class ExtraAggregate(_Table):
    """One extra output column: function over a value column."""

    function: str
    column: str
    name: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ExtraAggregate:
        if self.function not in _AGG_FUNCTIONS:
            msg = f"aggregation.extra function {self.function!r} is not one of {', '.join(_AGG_FUNCTIONS)}"
            raise ValueError(msg)
        return self

    @property
    def output_name(self) -> str:
        """The output column name: given, or e.g. 'sum_value'."""
        return self.name or f"{self.function}_{self.column}"


class AggregationConfig(_Table):
    """[aggregation]: window, session or custom per-key logic."""

    kind: AggregationKind = AggregationKind.WINDOW
    key: list[str] = Field(min_length=1)
    window: Duration | None = None
    slide: Duration | None = None
    gap: Duration | None = None
    processor: str | None = None
    extra: list[ExtraAggregate] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> AggregationConfig:
        for name in self.key:
            if not _IDENTIFIER.match(name):
                msg = f"aggregation.key {name!r} is not a plain column name"
                raise ValueError(msg)
        if self.kind is AggregationKind.WINDOW:
            if self.window is None:
                msg = "aggregation.window is required for kind 'window' (e.g. window = \"15 minutes\")"
                raise ValueError(msg)
            if self.slide is not None and (self.slide > self.window or self.slide.total_seconds() <= 0):
                msg = "aggregation.slide must be positive and not longer than aggregation.window"
                raise ValueError(msg)
        if self.kind is AggregationKind.SESSION and self.gap is None:
            msg = "aggregation.gap is required for kind 'session' (e.g. gap = \"30 minutes\")"
            raise ValueError(msg)
        if self.kind is AggregationKind.CUSTOM and not self.processor:
            msg = "aggregation.processor ('package.module:Class') is required for kind 'custom'"
            raise ValueError(msg)
        return self


class SinkFormat(StrEnum):
    """Supported sinks."""

    PARQUET = "parquet"
    CONSOLE = "console"


class SinkConfig(_Table):
    """[sink]: where final rows go."""

    format: SinkFormat = SinkFormat.PARQUET
    path: str | None = None
    partition_by: list[str] | None = None  # default: ["windowStart"] for kind "window", none otherwise
    retention: str | None = None  # the file sink's metadata log retention, e.g. "7d"
    # Tasks of the stage that updates state and writes each batch, i.e. files per output partition per batch
    # (window and session aggregations only). None: one per task slot (pipeline/sinks.py, output_writers).
    writers: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> SinkConfig:
        if self.format is SinkFormat.PARQUET and not self.path:
            msg = "sink.path is required for format 'parquet'"
            raise ValueError(msg)
        return self


class StateStoreKind(StrEnum):
    """State store providers."""

    ROCKSDB = "rocksdb"
    HDFS = "hdfs"


PROVIDER_CLASSES = {StateStoreKind.ROCKSDB: ROCKSDB_PROVIDER, StateStoreKind.HDFS: HDFS_PROVIDER}


class CheckpointConfig(_Table):
    """[checkpoint]: where the query keeps its progress and state, and how much history."""

    location: str
    state_store: StateStoreKind = StateStoreKind.ROCKSDB
    changelog: bool = True
    min_batches_to_retain: int = Field(default=20, ge=2)
    format_version: int = Field(default=1, ge=1, le=2)
    # "auto": sized at every run start (tidemark.plan.rocksdb_cap); a number of MB; "unbounded" (None): no cap.
    bounded_memory_mb: BoundedMemory = "auto"
    # About how many keys the state will hold at its largest: picks the provider of a new checkpoint when
    # state_store is not set (tidemark.plan.store_start); an existing checkpoint keeps its own.
    expected_state_keys: int | None = Field(default=None, ge=1)
    # RocksDB counts the rows in state with one read per write (numRowsTotal); None: only for kind "custom".
    track_state_rows: bool | None = None
    on_missing: str = Field(default="fail", pattern=r"^(fail|recover)$")
    max_lookback: Duration = timedelta(days=1)

    def to_spark_conf(self, track_state_rows: bool = True) -> dict[str, str]:
        """The Spark settings this table stands for (track_state_rows when the table leaves it open)."""
        conf = {
            "spark.sql.streaming.minBatchesToRetain": str(self.min_batches_to_retain),
            "spark.sql.streaming.stateStore.providerClass": PROVIDER_CLASSES[self.state_store],
        }
        if self.state_store is StateStoreKind.ROCKSDB:
            track = self.track_state_rows if self.track_state_rows is not None else track_state_rows
            bound = DEFAULT_BOUNDED_MEMORY_MB if self.bounded_memory_mb == "auto" else self.bounded_memory_mb
            conf.update(rocksdb_conf(self.changelog, bound, track))
            if self.format_version == 2:
                conf["spark.sql.streaming.stateStore.checkpointFormatVersion"] = "2"
        return conf


class TriggerMode(StrEnum):
    """How batches are triggered."""

    PROCESSING_TIME = "processing-time"
    AVAILABLE_NOW = "available-now"


class TriggerConfig(_Table):
    """[trigger]: batch cadence and the graceful-stop deadline."""

    mode: TriggerMode = TriggerMode.PROCESSING_TIME
    interval: Duration = timedelta(seconds=10)
    max_duration: Duration | None = None
    # How long a graceful stop waits for a gap between batches before interrupting the batch in flight.
    stop_timeout: Duration | None = None
    # Adaptive catch-up (file sources): size backlog batches to take about this long (docs/catchup.md).
    target_batch_duration: Duration | None = None

    @model_validator(mode="after")
    def _check(self) -> TriggerConfig:
        if self.target_batch_duration is not None and self.target_batch_duration.total_seconds() <= 0:
            msg = 'trigger.target_batch_duration must be positive, e.g. "2 minutes"'
            raise ValueError(msg)
        return self

    @property
    def effective_stop_timeout(self) -> timedelta:
        """Configured, or 3 trigger intervals but at least 2 minutes."""
        return self.stop_timeout or max(3 * self.interval, timedelta(minutes=2))


class QuarantineConfig(_Table):
    """[quarantine]: where malformed input records go (JSON lines, one file per batch)."""

    path: str


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class MonitorConfig(_Table):
    """[monitor]: progress log, watchdog, metrics endpoint and Pushgateway."""

    dir: str | None = None
    stuck_after: Duration | None = None
    on_stuck: str = Field(default="warn", pattern=r"^(warn|stop)$")
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    metrics_allow_remote: bool = False  # required to serve metrics on anything but loopback
    pushgateway: str | None = None  # e.g. "http://pushgateway:9091"
    pushgateway_job: str = Field(default="tidemark", min_length=1)
    pushgateway_timeout: Duration = timedelta(seconds=5)
    pushgateway_delete_previous: bool = True  # a run deletes the groups this pipeline's earlier runs pushed
    leak_batches: int = Field(default=5, ge=2)

    @model_validator(mode="after")
    def _check(self) -> MonitorConfig:
        if not is_loopback(self.metrics_host) and not self.metrics_allow_remote:
            msg = (
                f"metrics_host {self.metrics_host!r} serves metrics to other hosts: set "
                "[monitor] metrics_allow_remote = true to confirm (anyone who reaches it can read them)"
            )
            raise ValueError(msg)
        if self.pushgateway is not None:
            parts = urlsplit(self.pushgateway)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
                msg = 'pushgateway must be an http(s) URL like "http://pushgateway:9091"'
                raise ValueError(msg)
        if self.pushgateway_timeout.total_seconds() <= 0:
            msg = 'pushgateway_timeout must be positive, e.g. "5 seconds"'
            raise ValueError(msg)
        return self


class TidemarkConfig(_Table):
    """The whole pipeline config file."""

    pipeline: PipelineConfig
    spark: SparkConfig = SparkConfig()
    source: SourceConfig
    event_time: EventTimeConfig
    aggregation: AggregationConfig
    sink: SinkConfig
    checkpoint: CheckpointConfig
    trigger: TriggerConfig = TriggerConfig()
    quarantine: QuarantineConfig
    monitor: MonitorConfig = MonitorConfig()

    @model_validator(mode="after")
    def _check(self) -> TidemarkConfig:
        if self.sink.writers is not None and self.aggregation.kind is AggregationKind.CUSTOM:
            msg = "sink.writers applies to window and session aggregations, not to kind 'custom'"
            raise ValueError(msg)
        return self

    @property
    def partition_by(self) -> list[str]:
        """The sink's partition columns: configured, or windowStart for window aggregations."""
        if self.sink.partition_by is not None:
            return list(self.sink.partition_by)
        return ["windowStart"] if self.aggregation.kind is AggregationKind.WINDOW else []

    @property
    def monitor_dir(self) -> str:
        """The progress log folder: configured, or beside the checkpoint."""
        return self.monitor.dir or f"{self.checkpoint.location.rstrip('/')}-monitor"

    def spark_conf(self) -> dict[str, str]:
        """Every Spark setting the pipeline needs, user's [spark.conf] last so it wins."""
        conf: dict[str, str] = {
            "spark.sql.shuffle.partitions": str(self.spark.shuffle_partitions),
            "spark.sql.session.timeZone": "UTC",
        }
        # Per-key logic can leak state: its leak guard needs the rows in state (numRowsTotal) counted.
        conf.update(self.checkpoint.to_spark_conf(track_state_rows=self.aggregation.kind is AggregationKind.CUSTOM))
        if self.spark.driver_memory:
            conf["spark.driver.memory"] = self.spark.driver_memory
        if self.spark.executor_memory:
            conf["spark.executor.memory"] = self.spark.executor_memory
        conf.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in self.spark.conf.items()})
        return conf
