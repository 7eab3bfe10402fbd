"""Sinks: where a pipeline writes its final rows, behind one contract (sinks/base.py), one module per format."""

from __future__ import annotations

from tidemark.config import SinkFormat, TidemarkConfig
from tidemark.sinks.base import BatchHook, Sink, TableCommit, TableOutput, TableRollback, Tool
from tidemark.sinks.console import ConsoleSink
from tidemark.sinks.delta import DeltaSink
from tidemark.sinks.parquet import ParquetSink

SINKS: dict[SinkFormat, type[Sink]] = {s.format: s for s in (ParquetSink, DeltaSink, ConsoleSink)}


def sink_of(config: TidemarkConfig) -> Sink:
    """The config's sink."""
    return SINKS[config.sink.format](config)


__all__ = [
    "SINKS",
    "BatchHook",
    "ConsoleSink",
    "DeltaSink",
    "ParquetSink",
    "Sink",
    "TableCommit",
    "TableOutput",
    "TableRollback",
    "Tool",
    "sink_of",
]
