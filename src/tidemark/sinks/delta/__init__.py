"""The Delta Lake connector: the sink, and everything that knows Delta's format (its log, its snapshot through
delta-rs, its protocol, its RESTORE). Code outside this package asks the sink (sinks/base.py's contract) or this
facade, never the modules below it."""

from __future__ import annotations

from tidemark.sinks.delta.inspect import DeltaSinkReport, inspect_table
from tidemark.sinks.delta.sink import DeltaSink

__all__ = ["DeltaSink", "DeltaSinkReport", "inspect_table"]
