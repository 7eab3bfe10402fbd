"""Pydantic models of every config table; converters to Spark conf live beside their model."""

from __future__ import annotations

import ipaddress
import re
from datetime import timedelta
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, model_validator

from tidemark.compat import StrEnum
from tidemark.config.catalog import IcebergCatalogConfig
from tidemark.config.kafka import TYPED_OPTIONS, StartingPosition, check_kafka_options, parse_starting_position
from tidemark.config.provider import HDFS_PROVIDER as HDFS_PROVIDER
from tidemark.config.provider import PROVIDER_KEY as PROVIDER_KEY
from tidemark.config.provider import ROCKSDB_PROVIDER as ROCKSDB_PROVIDER
from tidemark.config.remote import Remote
from tidemark.config.rocksdb import DEFAULT_BOUNDED_MEMORY_MB, rocksdb_conf
from tidemark.durations import human, parse_duration
from tidemark.errors import UsageError


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
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class PipelineConfig(_Table):
    """[pipeline]: the name of the job, used for the query name and the run folder."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")


# local, local[N], local[*], local[N, maxFailures]; local-cluster[...] runs real executors and is not matched.
_LOCAL_MASTER = re.compile(r"^local(?:\[(\d+|\*)(?:,\s*\d+)?\])?$")


def local_threads(master: str) -> int | None:
    """The task slots of a local master (local: 1, local[N]: N, local[*]: this machine's cores), None for a master
    whose executors run elsewhere."""
    import os

    local = _LOCAL_MASTER.match(master.strip())
    if local is None:
        return None
    threads = local.group(1)
    if threads == "*":
        return os.cpu_count() or 1
    return int(threads) if threads else 1


class SparkConfig(_Table):
    """[spark]: where and how Spark runs."""

    master: str = "local[2]"
    remote: Remote = None  # a Spark Connect endpoint (docs/connect.md); SPARK_REMOTE in the environment wins
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
    EVENTHUBS = "eventhubs"  # Azure Event Hubs, read through its Kafka endpoint


KAFKA_FORMATS = frozenset({SourceFormat.KAFKA, SourceFormat.EVENTHUBS})
_SECURITY_PROTOCOLS = ("SASL_SSL", "SASL_PLAINTEXT")


class SourceConfig(_Table):
    """[source]: a landing folder of files (the default), the rate source, Kafka or Azure Event Hubs."""

    format: SourceFormat = SourceFormat.JSON
    path: str | None = None
    schema_ddl: str | None = Field(default=None, alias="schema")
    max_files_per_trigger: int | None = Field(default=None, ge=1)
    options: dict[str, str | int | float | bool] = Field(default_factory=dict)
    # Kafka and Event Hubs (docs/kafka.md, docs/eventhubs.md)
    bootstrap_servers: str | None = None  # eventhubs: overrides <namespace>.servicebus.windows.net:9093
    topic: str | None = None
    topic_pattern: str | None = None  # a Java regular expression (Spark's subscribePattern)
    starting_offsets: str | dict[str, dict[str, int]] = "earliest"
    max_offsets_per_trigger: int | None = Field(default=None, ge=1)
    min_partitions: int | None = Field(default=None, ge=1)
    fail_on_data_loss: bool = True
    connect_timeout: Duration = timedelta(seconds=30)  # tidemark's own metadata requests (start, inspect, recover)
    # Secret options: the option's value is read from this environment variable / file when the run starts.
    options_from_env: dict[str, str] = Field(default_factory=dict)
    options_from_file: dict[str, str] = Field(default_factory=dict)
    # Event Hubs
    namespace: str | None = Field(default=None, pattern=r"^[A-Za-z][A-Za-z0-9-]{0,62}$")
    event_hub: str | None = None
    connection_string_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    connection_string_file: str | None = None
    security_protocol: str | None = None  # eventhubs: SASL_SSL; SASL_PLAINTEXT only for a local emulator
    # rate source
    rows_per_second: int = Field(default=100, ge=1)
    rate_keys: int = Field(default=100, ge=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, hide_input_in_errors=True)

    @property
    def is_file(self) -> bool:
        """True for the file formats that read a landing folder."""
        return self.format in (SourceFormat.JSON, SourceFormat.CSV, SourceFormat.PARQUET)

    @property
    def is_kafka(self) -> bool:
        """True for the sources read through Spark's Kafka connector (Kafka, Event Hubs)."""
        return self.format in KAFKA_FORMATS

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics named in the config (Event Hubs: the event hub); empty with a topic pattern."""
        name = self.event_hub if self.format is SourceFormat.EVENTHUBS else self.topic
        return tuple(t.strip() for t in (name or "").split(",") if t.strip())

    @property
    def subscription(self) -> str:
        """What the source reads, for messages: `topic events` or `topics matching events-.*`."""
        if self.topic_pattern:
            return f"topics matching {self.topic_pattern!r}"
        names = self.topics
        return f"topic {names[0]!r}" if len(names) == 1 else f"topics {', '.join(names)}"

    @property
    def starting_position(self) -> StartingPosition:
        """Where a new query starts (validated when the config is loaded)."""
        return parse_starting_position(self.starting_offsets)

    @model_validator(mode="after")
    def _check(self) -> SourceConfig:
        if self.is_file:
            if not self.path:
                msg = f"source.path is required for format {self.format.value!r}"
                raise ValueError(msg)
            if not self.schema_ddl:
                msg = f"source.schema (DDL like 'user STRING, ts STRING') is required for {self.format.value!r}"
                raise ValueError(msg)
        if self.is_kafka:
            self._check_kafka()
        else:
            kafka_only = [k for k in _KAFKA_ONLY_KEYS if getattr(self, k) not in (None, {}, "earliest", True)]
            kafka_only += ["connect_timeout"] if self.connect_timeout != timedelta(seconds=30) else []
            if kafka_only:
                msg = f"source.{kafka_only[0]} applies to formats 'kafka' and 'eventhubs' only"
                raise ValueError(msg)
        return self

    def _check_kafka(self) -> None:
        name = self.format.value
        hubs = self.format is SourceFormat.EVENTHUBS
        if not self.schema_ddl:
            msg = f"source.schema (DDL of the JSON in each record's value) is required for {name!r}"
            raise ValueError(msg)
        if self.path or self.max_files_per_trigger:
            msg = f"source.{'path' if self.path else 'max_files_per_trigger'} applies to file sources, not {name!r}"
            raise ValueError(msg)
        named = self.event_hub if hubs else self.topic
        if bool(named) == bool(self.topic_pattern):
            what = "event_hub" if hubs else "topic"
            msg = f"source: give exactly one of {what} and topic_pattern for format {name!r}"
            raise ValueError(msg)
        if hubs:
            if self.topic:
                msg = "source.topic: for format 'eventhubs' name the event hub with event_hub"
                raise ValueError(msg)
            self._check_event_hubs()
        else:
            if not self.bootstrap_servers:
                msg = "source.bootstrap_servers (host:port[,host:port]) is required for format 'kafka'"
                raise ValueError(msg)
            given = [k for k in _EVENT_HUBS_KEYS if getattr(self, k) is not None]
            if given:
                msg = f"source.{given[0]} applies to format 'eventhubs' (for Kafka, use options)"
                raise ValueError(msg)
        self.starting_position  # noqa: B018 (validates: raises ValueError naming the accepted forms)
        problem = check_kafka_options(self.options, hubs)
        if problem is not None:
            raise ValueError(problem)
        for table in ("options_from_env", "options_from_file"):
            for option in getattr(self, table):
                if option.lower() in TYPED_OPTIONS or not option.strip():
                    msg = f"source.{table}: {option!r} is not a secret option of the Kafka client"
                    raise ValueError(msg)
                if option in self.options:
                    msg = f"source.{table}.{option} is also in source.options: give it once"
                    raise ValueError(msg)
        both = set(self.options_from_env) & set(self.options_from_file)
        if both:
            msg = f"source.options_from_env and options_from_file both set {sorted(both)[0]}: choose one"
            raise ValueError(msg)
        if self.connect_timeout.total_seconds() <= 0:
            msg = 'source.connect_timeout must be positive, e.g. "30 seconds"'
            raise ValueError(msg)

    def _check_event_hubs(self) -> None:
        if not self.namespace:
            msg = "source.namespace (the Event Hubs namespace, without .servicebus.windows.net) is required"
            raise ValueError(msg)
        if bool(self.connection_string_env) == bool(self.connection_string_file):
            msg = (
                "source: give exactly one of connection_string_env (an environment variable's name) and "
                "connection_string_file (a file holding the connection string); it never goes in the TOML"
            )
            raise ValueError(msg)
        if self.security_protocol is not None and self.security_protocol not in _SECURITY_PROTOCOLS:
            msg = "source.security_protocol is SASL_SSL (Event Hubs) or SASL_PLAINTEXT (a local emulator only)"
            raise ValueError(msg)
        if self.security_protocol == "SASL_PLAINTEXT" and not self.bootstrap_servers:
            msg = (
                "source.security_protocol = 'SASL_PLAINTEXT' sends the connection string unencrypted: it is for a "
                "local emulator given in bootstrap_servers, never for <namespace>.servicebus.windows.net"
            )
            raise ValueError(msg)
        secret = [k for k in self.options_from_env if k.lower() == "kafka.sasl.jaas.config"]
        secret += [k for k in self.options_from_file if k.lower() == "kafka.sasl.jaas.config"]
        if secret:
            msg = "source.options_from_*: Event Hubs' kafka.sasl.jaas.config comes from the connection string"
            raise ValueError(msg)


_KAFKA_ONLY_KEYS = (
    "bootstrap_servers",
    "topic",
    "topic_pattern",
    "starting_offsets",
    "max_offsets_per_trigger",
    "min_partitions",
    "fail_on_data_loss",
    "options_from_env",
    "options_from_file",
    "namespace",
    "event_hub",
    "connection_string_env",
    "connection_string_file",
    "security_protocol",
)
_EVENT_HUBS_KEYS = ("namespace", "event_hub", "connection_string_env", "connection_string_file", "security_protocol")


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
    DELTA = "delta"
    ICEBERG = "iceberg"
    CONSOLE = "console"


class SinkConfig(_Table):
    """[sink]: where final rows go."""

    format: SinkFormat = SinkFormat.PARQUET
    path: str | None = None
    # A catalog table instead of a path (Delta only): its location is resolved through the session's catalog when
    # the pipeline starts and kept in the checkpoint, where the tools read it without Spark.
    table: str | None = None
    partition_by: list[str] | None = None  # default: ["windowStart"] for kind "window", none otherwise
    retention: str | None = None  # the file sink's metadata log retention, e.g. "7d"
    # Tasks of the stage that updates state and writes each batch, i.e. files per output partition per batch
    # (window and session aggregations only). None: one per task slot (pipeline/sinks.py, output_writers).
    writers: int | None = Field(default=None, ge=1)
    catalog: IcebergCatalogConfig | None = None  # [sink.catalog]: format "iceberg" only

    @model_validator(mode="after")
    def _check(self) -> SinkConfig:
        if self.format is SinkFormat.ICEBERG or self.catalog is not None:
            return self._check_iceberg()
        if self.table is not None:
            if self.format is not SinkFormat.DELTA:
                msg = f"sink.table is for format 'delta' (a catalog table), not '{self.format.value}': give sink.path"
                raise ValueError(msg)
            if self.path:
                msg = "give sink.path or sink.table, not both (a catalog table's location is the catalog's)"
                raise ValueError(msg)
            if not _TABLE_NAME.fullmatch(self.table):
                msg = f"sink.table {self.table!r} is not a table name (name, schema.name or catalog.schema.name)"
                raise ValueError(msg)
        elif self.format is not SinkFormat.CONSOLE and not self.path:
            extra = " (or sink.table, a catalog table)" if self.format is SinkFormat.DELTA else ""
            msg = f"sink.path{extra} is required for format '{self.format.value}'"
            raise ValueError(msg)
        return self

    def _check_iceberg(self) -> SinkConfig:
        if self.format is not SinkFormat.ICEBERG:
            msg = f"sink.catalog is for format 'iceberg', not '{self.format.value}'"
            raise ValueError(msg)
        if self.path:
            msg = "format 'iceberg' writes sink.table in sink.catalog, not sink.path: drop sink.path"
            raise ValueError(msg)
        if self.table is None or not _NAMESPACED_TABLE.fullmatch(self.table):
            msg = "format 'iceberg' needs sink.table = \"namespace.table\" (a table in sink.catalog)"
            raise ValueError(msg)
        if self.catalog is None:
            msg = 'format \'iceberg\' needs [sink.catalog] with type = "hadoop" or "jdbc" and warehouse (a folder)'
            raise ValueError(msg)
        return self


# A table name as a catalog takes it: up to three dot-separated parts, each plain or back-quoted.
_NAMESPACED_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")
_TABLE_NAME = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)(?:\.(?:[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)){0,2}")


class StateStoreKind(StrEnum):
    """State store providers."""

    ROCKSDB = "rocksdb"
    HDFS = "hdfs"

    @classmethod
    def of_provider(cls, provider_class: str | None) -> StateStoreKind:
        """The kind a recorded or configured provider class is (Spark's default, HDFS-backed, when none)."""
        return cls.ROCKSDB if provider_class == ROCKSDB_PROVIDER else cls.HDFS


PROVIDER_CLASSES = {StateStoreKind.ROCKSDB: ROCKSDB_PROVIDER, StateStoreKind.HDFS: HDFS_PROVIDER}


class CheckpointConfig(_Table):
    """[checkpoint]: where the query keeps its progress and state, and how much history."""

    location: str
    state_store: StateStoreKind = StateStoreKind.ROCKSDB
    changelog: bool = True
    min_batches_to_retain: int = Field(default=20, ge=2)
    format_version: int = Field(default=1, ge=1, le=2)
    # "auto": sized at every run start (tidemark.sizing.rocksdb_cap); a number of MB; "unbounded" (None): no cap.
    bounded_memory_mb: BoundedMemory = "auto"
    # About how many keys the state will hold at its largest: picks the provider of a new checkpoint when
    # state_store is not set (tidemark.sizing.store_start); an existing checkpoint keeps its own.
    expected_state_keys: int | None = Field(default=None, ge=1)
    # RocksDB counts the rows in state with one read per write (numRowsTotal); None: only for kind "custom".
    track_state_rows: bool | None = None
    on_missing: str = Field(default="fail", pattern=r"^(fail|recover)$")
    max_lookback: Duration = timedelta(days=1)

    def to_spark_conf(self, track_state_rows: bool = True) -> dict[str, str]:
        """The Spark settings this table stands for (track_state_rows when the table leaves it open)."""
        conf = {
            "spark.sql.streaming.minBatchesToRetain": str(self.min_batches_to_retain),
            PROVIDER_KEY: PROVIDER_CLASSES[self.state_store],
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
