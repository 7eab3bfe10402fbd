"""The Parquet sink: Spark's file sink with its `_spark_metadata` log, and everything that knows that log (what
is committed, tidemark's per-batch ledger of its files, the folder's partition layout, a rollback's files). Code
outside this package imports only what is exported here."""

from __future__ import annotations

from tidemark.sinks.parquet.layout import committed_data_files, read_sink_layout
from tidemark.sinks.parquet.ledger import LedgerEntry, compact_ledger, read_ledger, record_batch
from tidemark.sinks.parquet.log import data_files as sink_data_files
from tidemark.sinks.parquet.log import partition_start
from tidemark.sinks.parquet.log import read_log as read_sink_log
from tidemark.sinks.parquet.recovery import finish_pending
from tidemark.sinks.parquet.sink import ParquetSink

__all__ = [
    "LedgerEntry",
    "ParquetSink",
    "committed_data_files",
    "compact_ledger",
    "finish_pending",
    "partition_start",
    "read_ledger",
    "read_sink_layout",
    "read_sink_log",
    "record_batch",
    "sink_data_files",
]
