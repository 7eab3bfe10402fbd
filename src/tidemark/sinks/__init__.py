"""Sinks: where a pipeline writes its final rows, behind one contract (sinks/base.py), one module or package per
format."""

from __future__ import annotations

from tidemark.config import SinkFormat, TidemarkConfig
from tidemark.sinks.base import (
    AsideKind,
    BatchHook,
    HeldWindows,
    LogTrim,
    Sink,
    SinkAside,
    SinkCheck,
    SinkInspection,
    SinkLimits,
    SinkMatch,
    SinkRecovery,
    SinkRollback,
    SinkWindows,
    TableCommit,
    TableOutput,
    TableRollback,
    Tool,
)
from tidemark.sinks.console import ConsoleSink
from tidemark.sinks.delta import DeltaSink
from tidemark.sinks.iceberg import IcebergSink
from tidemark.sinks.parquet import ParquetSink
from tidemark.storage import Storage

SINKS: dict[SinkFormat, type[Sink]] = {s.format: s for s in (ParquetSink, DeltaSink, IcebergSink, ConsoleSink)}


def sink_of(config: TidemarkConfig) -> Sink:
    """The config's sink."""
    return SINKS[config.sink.format](config)


def claiming(folder: Storage) -> type[Sink] | None:
    """The connector whose own format the folder holds (a Delta table), None for a folder of plain files."""
    return next((s for s in SINKS.values() if s.claims(folder)), None)


def reader_of(folder: Storage) -> type[Sink]:
    """The connector that reads what the folder holds: the one whose own format it is, else the file sink's (a
    folder of plain Parquet files, with or without Spark's file sink log)."""
    return claiming(folder) or ParquetSink


__all__ = [
    "SINKS",
    "AsideKind",
    "BatchHook",
    "ConsoleSink",
    "DeltaSink",
    "HeldWindows",
    "IcebergSink",
    "LogTrim",
    "ParquetSink",
    "Sink",
    "SinkAside",
    "SinkCheck",
    "SinkInspection",
    "SinkLimits",
    "SinkMatch",
    "SinkRecovery",
    "SinkRollback",
    "SinkWindows",
    "TableCommit",
    "TableOutput",
    "TableRollback",
    "Tool",
    "claiming",
    "reader_of",
    "sink_of",
]
