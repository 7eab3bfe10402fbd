"""The only code that knows tidemark's and Spark's on-disk formats, for reading AND writing.

A checkpoint (`offsets/`, `commits/`, `sources/`, `state/`, `metadata`, tidemark's `_tidemark/`), a file sink's
`_spark_metadata` log, tidemark's progress log. Everything else asks what is exported here and never names a path
inside those folders nor reads, writes, moves or deletes one of their files itself; `formats.layout` (the names)
is imported only inside this package. The one named exception is the JVM state writer of `state repartition`,
which Python calls through `formats.state_rewrite`.
"""

from __future__ import annotations

from tidemark.formats.batches import (
    FileSet,
    compacted_log_through,
    delete_files,
    files_after,
    files_through,
    finish_removals,
    remove_files,
    sink_files_after,
    unloadable_stores,
)
from tidemark.formats.checkpoint import Checkpoint, CheckpointStatus
from tidemark.formats.clone import clone_whole, clone_without_state, is_store_data, repoint_schema_paths
from tidemark.formats.entries import (
    SHUFFLE_PARTITIONS,
    CommitEntry,
    OffsetEntry,
    OperatorFile,
    OperatorMetadata,
    StoreMetadata,
    relocate_schema_paths,
    rewrite_offset_conf,
    rewrite_offset_watermark,
    rewrite_operator_metadata,
)
from tidemark.formats.identify import refuse_foreign, what_is_there
from tidemark.formats.integrity import (
    CheckpointHealth,
    Damage,
    FileProblem,
    LogHealth,
    SourceEntryProblem,
    check_newest_state,
    read_health,
    read_source_logs,
)
from tidemark.formats.join_state import (
    EVENT_TIME,
    JOIN_STORES,
    MERGE_OPERATOR_KEY,
    MULTI_VALUED,
    TIME_POSTFIX,
    TIME_PREFIX,
    join_families,
    merge_delimiter,
    split_key,
)
from tidemark.formats.join_state import values as multi_values
from tidemark.formats.layout import (
    ARCHIVE_DIR,
    LOCK_FILE,
    QUARANTINE_DONE_FILE,
    QUARANTINE_SUFFIX,
    RECOVERY_PLAN_FILE,
    SINK_LOG_DIR,
    FileKind,
    quarantine_batch,
    quarantine_batch_name,
)
from tidemark.formats.ledger import LedgerEntry, compact_ledger, ledger_files, read_ledger, record_batch
from tidemark.formats.ledger import batch_files as sink_batch_files
from tidemark.formats.lock import (
    LockInfo,
    RunLock,
    ensure_unlocked,
    lock_is_live,
    locked_message,
    read_lock,
)
from tidemark.formats.lock import clear_lock as clear_run_lock
from tidemark.formats.log_features import log_features
from tidemark.formats.operators import OperatorEntry, operator_entries
from tidemark.formats.operators import schema_files as operator_schema_files
from tidemark.formats.progress import BatchProgress, NumericMetrics, StateOperatorProgress, parse_spark_time
from tidemark.formats.progress_log import (
    ROCKSDB_CAP_FIELD,
    EventType,
    LogEvent,
    is_record,
    iter_log,
    iter_progress,
    last_progress,
    no_records,
    read_progress,
)
from tidemark.formats.progress_log import log_files as progress_log_files
from tidemark.formats.progress_log import read_log as read_progress_log
from tidemark.formats.progress_writer import ProgressLogWriter, log_path_for, utc_now_text
from tidemark.formats.quarantine_files import entries_after as quarantine_entries_after
from tidemark.formats.quarantine_files import read_marker as read_quarantine_marker
from tidemark.formats.quarantine_files import write_marker as write_quarantine_marker
from tidemark.formats.recovery_marker import RecoveryMarker, archive_marker, marker_paths, place_archived_marker
from tidemark.formats.recovery_marker import read_marker as read_recovery_marker
from tidemark.formats.recovery_marker import write_marker as write_recovery_marker
from tidemark.formats.scan import CheckpointScan, OperatorScan, StoreScan, scan_checkpoint
from tidemark.formats.sink_layout import (
    CommittedFiles,
    SinkLayout,
    SinkWindows,
    committed_data_files,
    read_sink_layout,
    sink_windows,
)
from tidemark.formats.sink_transaction import (
    SinkTransaction,
    clear_sink_rollback,
    mark_sink_rollback,
    read_sink_rollback,
    read_sink_transaction,
    write_sink_transaction,
)
from tidemark.formats.sinklog import LogFile as SinkLogFile
from tidemark.formats.sinklog import SinkLog, entry_rel, partition_start, require_sink
from tidemark.formats.sinklog import batch_entries as sink_batch_entries
from tidemark.formats.sinklog import companions as with_checksums
from tidemark.formats.sinklog import data_files as sink_data_files
from tidemark.formats.sinklog import entries_in as sink_entries_in
from tidemark.formats.sinklog import inject_entries as inject_sink_entries
from tidemark.formats.sinklog import log_files as sink_log_files
from tidemark.formats.sinklog import log_files_after as sink_log_files_after
from tidemark.formats.sinklog import log_folder as sink_log_folder
from tidemark.formats.sinklog import log_names as sink_log_names
from tidemark.formats.sinklog import log_uri as sink_log_uri
from tidemark.formats.sinklog import read_log as read_sink_log
from tidemark.formats.sinklog import skipped_batches as sink_log_skipped_batches
from tidemark.formats.snapshot_zip import snapshot_metadata, zip_references
from tidemark.formats.state_files import FetchReport, fetch_state, private_copy
from tidemark.formats.state_replay import Method as StateReadMethod
from tidemark.formats.state_replay import StateNotReadable, StoreRows, read_store
from tidemark.formats.state_rewrite import MoveResult, StoreMove, helper_spec, run_move, state_root
from tidemark.formats.state_schema import (
    TIMER_FAMILIES,
    ColumnFamilySchema,
    Field,
    keyless_operator,
    parse_schema_file,
    store_schemas,
    struct_fields,
    type_signature,
)
from tidemark.formats.state_schema import names as field_names
from tidemark.formats.state_size import StateSize, StoreSize, state_size
from tidemark.formats.swap import (
    checkpoint_archive,
    finish_checkpoint_swaps,
    pending_checkpoint_swaps,
    swap_in,
    swap_names,
)
from tidemark.formats.unsafe_row import RowDecodeError, decode_row, fields_from_ddl

__all__ = [
    "ARCHIVE_DIR",
    "EVENT_TIME",
    "JOIN_STORES",
    "LOCK_FILE",
    "MERGE_OPERATOR_KEY",
    "MULTI_VALUED",
    "QUARANTINE_DONE_FILE",
    "QUARANTINE_SUFFIX",
    "RECOVERY_PLAN_FILE",
    "ROCKSDB_CAP_FIELD",
    "SHUFFLE_PARTITIONS",
    "SINK_LOG_DIR",
    "TIMER_FAMILIES",
    "TIME_POSTFIX",
    "TIME_PREFIX",
    "BatchProgress",
    "Checkpoint",
    "CheckpointHealth",
    "CheckpointScan",
    "CheckpointStatus",
    "ColumnFamilySchema",
    "CommitEntry",
    "CommittedFiles",
    "Damage",
    "EventType",
    "FetchReport",
    "Field",
    "FileKind",
    "FileProblem",
    "FileSet",
    "LedgerEntry",
    "LockInfo",
    "LogEvent",
    "LogHealth",
    "MoveResult",
    "NumericMetrics",
    "OffsetEntry",
    "OperatorEntry",
    "OperatorFile",
    "OperatorMetadata",
    "OperatorScan",
    "ProgressLogWriter",
    "RecoveryMarker",
    "RowDecodeError",
    "RunLock",
    "SinkLayout",
    "SinkLog",
    "SinkLogFile",
    "SinkTransaction",
    "SinkWindows",
    "SourceEntryProblem",
    "StateNotReadable",
    "StateOperatorProgress",
    "StateReadMethod",
    "StateSize",
    "StoreMetadata",
    "StoreMove",
    "StoreRows",
    "StoreScan",
    "StoreSize",
    "archive_marker",
    "check_newest_state",
    "checkpoint_archive",
    "clear_run_lock",
    "clear_sink_rollback",
    "clone_whole",
    "clone_without_state",
    "committed_data_files",
    "compact_ledger",
    "compacted_log_through",
    "decode_row",
    "delete_files",
    "ensure_unlocked",
    "entry_rel",
    "fetch_state",
    "field_names",
    "fields_from_ddl",
    "files_after",
    "files_through",
    "finish_checkpoint_swaps",
    "finish_removals",
    "helper_spec",
    "inject_sink_entries",
    "is_record",
    "is_store_data",
    "iter_log",
    "iter_progress",
    "join_families",
    "keyless_operator",
    "last_progress",
    "ledger_files",
    "lock_is_live",
    "locked_message",
    "log_features",
    "log_path_for",
    "mark_sink_rollback",
    "marker_paths",
    "merge_delimiter",
    "multi_values",
    "no_records",
    "operator_entries",
    "operator_schema_files",
    "parse_schema_file",
    "parse_spark_time",
    "partition_start",
    "pending_checkpoint_swaps",
    "place_archived_marker",
    "private_copy",
    "progress_log_files",
    "quarantine_batch",
    "quarantine_batch_name",
    "quarantine_entries_after",
    "read_health",
    "read_ledger",
    "read_lock",
    "read_progress",
    "read_progress_log",
    "read_quarantine_marker",
    "read_recovery_marker",
    "read_sink_layout",
    "read_sink_log",
    "read_sink_rollback",
    "read_sink_transaction",
    "read_source_logs",
    "read_store",
    "record_batch",
    "refuse_foreign",
    "relocate_schema_paths",
    "remove_files",
    "repoint_schema_paths",
    "require_sink",
    "rewrite_offset_conf",
    "rewrite_offset_watermark",
    "rewrite_operator_metadata",
    "run_move",
    "scan_checkpoint",
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
    "snapshot_metadata",
    "split_key",
    "state_root",
    "state_size",
    "store_schemas",
    "struct_fields",
    "swap_in",
    "swap_names",
    "type_signature",
    "unloadable_stores",
    "utc_now_text",
    "what_is_there",
    "with_checksums",
    "write_quarantine_marker",
    "write_recovery_marker",
    "write_sink_transaction",
    "zip_references",
]
