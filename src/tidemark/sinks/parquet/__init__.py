"""The Parquet sink: Spark's file sink with its `_spark_metadata` log, and everything that knows that log (what
is committed, tidemark's per-batch ledger of its files, the folder's partition layout, a rollback's files). Code
outside this package imports only what is exported here."""

from __future__ import annotations

from tidemark.sinks.parquet.inspect import SinkReport
from tidemark.sinks.parquet.layout import (
    CommittedFiles,
    SinkLayout,
    committed_data_files,
    read_sink_layout,
    sink_windows,
)
from tidemark.sinks.parquet.ledger import LedgerEntry, compact_ledger, ledger_files, read_ledger, record_batch
from tidemark.sinks.parquet.ledger import batch_files as sink_batch_files
from tidemark.sinks.parquet.log import (
    SINK_LOG_DIR,
    SinkLog,
    entry_rel,
    marker_paths,
    partition_start,
    query_log,
    require_sink,
)
from tidemark.sinks.parquet.log import LogFile as SinkLogFile
from tidemark.sinks.parquet.log import batch_entries as sink_batch_entries
from tidemark.sinks.parquet.log import companions as with_checksums
from tidemark.sinks.parquet.log import data_files as sink_data_files
from tidemark.sinks.parquet.log import entries_in as sink_entries_in
from tidemark.sinks.parquet.log import inject_entries as inject_sink_entries
from tidemark.sinks.parquet.log import log_files as sink_log_files
from tidemark.sinks.parquet.log import log_files_after as sink_log_files_after
from tidemark.sinks.parquet.log import log_folder as sink_log_folder
from tidemark.sinks.parquet.log import log_names as sink_log_names
from tidemark.sinks.parquet.log import log_uri as sink_log_uri
from tidemark.sinks.parquet.log import read_log as read_sink_log
from tidemark.sinks.parquet.log import skipped_batches as sink_log_skipped_batches
from tidemark.sinks.parquet.recovery import finish_pending
from tidemark.sinks.parquet.rollback import sink_files_after
from tidemark.sinks.parquet.sink import ParquetSink

__all__ = [
    "SINK_LOG_DIR",
    "CommittedFiles",
    "LedgerEntry",
    "ParquetSink",
    "SinkLayout",
    "SinkLog",
    "SinkLogFile",
    "SinkReport",
    "committed_data_files",
    "compact_ledger",
    "entry_rel",
    "finish_pending",
    "inject_sink_entries",
    "ledger_files",
    "marker_paths",
    "partition_start",
    "query_log",
    "read_ledger",
    "read_sink_layout",
    "read_sink_log",
    "record_batch",
    "require_sink",
    "sink_batch_entries",
    "sink_batch_files",
    "sink_data_files",
    "sink_entries_in",
    "sink_files_after",
    "sink_log_files",
    "sink_log_files_after",
    "sink_log_folder",
    "sink_log_names",
    "sink_log_skipped_batches",
    "sink_log_uri",
    "sink_windows",
    "with_checksums",
]
