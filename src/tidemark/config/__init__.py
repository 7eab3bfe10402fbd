"""The pipeline config: one frozen pydantic model tree loaded from TOML."""

from __future__ import annotations

from tidemark.config.load import load_config, parse_config
from tidemark.config.model import (
    KAFKA_FORMATS,
    AggregationConfig,
    AggregationKind,
    CheckpointConfig,
    EventTimeConfig,
    ExtraAggregate,
    MonitorConfig,
    PipelineConfig,
    QuarantineConfig,
    SinkConfig,
    SinkFormat,
    SourceConfig,
    SourceFormat,
    SparkConfig,
    StateStoreKind,
    TidemarkConfig,
    TriggerConfig,
    TriggerMode,
    local_threads,
)

__all__ = [
    "KAFKA_FORMATS",
    "AggregationConfig",
    "AggregationKind",
    "CheckpointConfig",
    "EventTimeConfig",
    "ExtraAggregate",
    "MonitorConfig",
    "PipelineConfig",
    "QuarantineConfig",
    "SinkConfig",
    "SinkFormat",
    "SourceConfig",
    "SourceFormat",
    "SparkConfig",
    "StateStoreKind",
    "TidemarkConfig",
    "TriggerConfig",
    "TriggerMode",
    "load_config",
    "local_threads",
    "parse_config",
]
