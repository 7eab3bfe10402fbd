"""The Apache Iceberg connector: the sink, and everything that knows Iceberg's format (its metadata, snapshots and
their summaries, live files through pyiceberg). Code outside this package asks the sink (sinks/base.py's contract)
or this facade, never the modules below it."""

from __future__ import annotations

from tidemark.sinks.iceberg.inspect import IcebergSinkReport, inspect_table
from tidemark.sinks.iceberg.sink import IcebergSink

__all__ = ["IcebergSink", "IcebergSinkReport", "inspect_table"]
