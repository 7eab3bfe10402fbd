"""Sinks: where a pipeline writes its final rows, behind one contract (sinks/base.py), one module or package per
format."""

from __future__ import annotations

from tidemark.config import SinkFormat, TidemarkConfig
from tidemark.sinks.base import BatchHook, HeldWindows, Sink, TableCommit, TableOutput, TableRollback, Tool
from tidemark.sinks.console import ConsoleSink
from tidemark.sinks.delta import DeltaSink
from tidemark.sinks.parquet import ParquetSink
from tidemark.storage import Storage

SINKS: dict[SinkFormat, type[Sink]] = {s.format: s for s in (ParquetSink, DeltaSink, ConsoleSink)}


def sink_of(config: TidemarkConfig) -> Sink:
    """The config's sink."""
    return SINKS[config.sink.format](config)


def claiming(folder: Storage) -> type[Sink] | None:
    """The connector whose own format the folder holds (a Delta table), None for a folder of plain files."""
    return next((s for s in SINKS.values() if s.claims(folder)), None)


__all__ = [
    "SINKS",
    "BatchHook",
    "ConsoleSink",
    "DeltaSink",
    "HeldWindows",
    "ParquetSink",
    "Sink",
    "TableCommit",
    "TableOutput",
    "TableRollback",
    "Tool",
    "claiming",
    "sink_of",
]
