"""The only code that knows the checkpoint's on-disk formats (Spark's and tidemark's), for reading AND writing.

A checkpoint (`offsets/`, `commits/`, `sources/`, `state/`, `metadata`, tidemark's `_tidemark/`) and tidemark's
progress log. A connector's own formats (a file sink's log, a Delta table's) belong to its package under sinks/ or
sources/. Everything else asks what is exported here and never names a path inside those folders nor reads,
writes, moves or deletes one of their files itself; `formats.layout` (the names) is imported only inside this
package. The one named exception is the JVM state writer of `state repartition`,
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
    unloadable_stores,
)
from tidemark.formats.checkpoint import Checkpoint, CheckpointStatus
from tidemark.formats.clone import (
    clone_whole,
    clone_without_state,
    is_store_data,
    record_unique_ids,
    repoint_schema_paths,
)
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
    INTERNAL_FAMILIES,
    JOIN_STORES,
    JOIN_V4_STORES,
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
    LEDGER_DIR,
    LOCK_FILE,
    QUARANTINE_DONE_FILE,
    QUARANTINE_SUFFIX,
    RECOVERY_PLAN_FILE,
    FileKind,
    crc_companions,
    log_file_batch,
    quarantine_batch,
    quarantine_batch_name,
)
from tidemark.formats.lock import (
    LockInfo,
    RunLock,
    ensure_unlocked,
    lock_is_live,
    locked_message,
    pid_alive,
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
from tidemark.formats.recovery_marker import RecoveryMarker, archive_marker, place_archived_marker
from tidemark.formats.recovery_marker import read_marker as read_recovery_marker
from tidemark.formats.recovery_marker import write_marker as write_recovery_marker
from tidemark.formats.scan import CheckpointScan, OperatorScan, StoreScan, scan_checkpoint
from tidemark.formats.sink_transaction import (
    SinkTransaction,
    clear_sink_rollback,
    mark_sink_rollback,
    read_sink_rollback,
    read_sink_transaction,
    write_sink_transaction,
)
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
    claim_staging,
    finish_checkpoint_swaps,
    pending_checkpoint_swaps,
    release_staging,
    remove_abandoned_stagings,
    swap_in,
    swap_names,
)
from tidemark.formats.unsafe_row import RowDecodeError, decode_row, fields_from_ddl

__all__ = [
    "ARCHIVE_DIR",
    "EVENT_TIME",
    "INTERNAL_FAMILIES",
    "JOIN_STORES",
    "JOIN_V4_STORES",
    "LEDGER_DIR",
    "LOCK_FILE",
    "MERGE_OPERATOR_KEY",
    "MULTI_VALUED",
    "QUARANTINE_DONE_FILE",
    "QUARANTINE_SUFFIX",
    "RECOVERY_PLAN_FILE",
    "ROCKSDB_CAP_FIELD",
    "SHUFFLE_PARTITIONS",
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
    "Damage",
    "EventType",
    "FetchReport",
    "Field",
    "FileKind",
    "FileProblem",
    "FileSet",
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
    "SinkTransaction",
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
    "claim_staging",
    "clear_run_lock",
    "clear_sink_rollback",
    "clone_whole",
    "clone_without_state",
    "compacted_log_through",
    "crc_companions",
    "decode_row",
    "delete_files",
    "ensure_unlocked",
    "fetch_state",
    "field_names",
    "fields_from_ddl",
    "files_after",
    "files_through",
    "finish_checkpoint_swaps",
    "finish_removals",
    "helper_spec",
    "is_record",
    "is_store_data",
    "iter_log",
    "iter_progress",
    "join_families",
    "keyless_operator",
    "last_progress",
    "lock_is_live",
    "locked_message",
    "log_features",
    "log_file_batch",
    "log_path_for",
    "mark_sink_rollback",
    "merge_delimiter",
    "multi_values",
    "no_records",
    "operator_entries",
    "operator_schema_files",
    "parse_schema_file",
    "parse_spark_time",
    "pending_checkpoint_swaps",
    "pid_alive",
    "place_archived_marker",
    "private_copy",
    "progress_log_files",
    "quarantine_batch",
    "quarantine_batch_name",
    "quarantine_entries_after",
    "read_health",
    "read_lock",
    "read_progress",
    "read_progress_log",
    "read_quarantine_marker",
    "read_recovery_marker",
    "read_sink_rollback",
    "read_sink_transaction",
    "read_source_logs",
    "read_store",
    "record_unique_ids",
    "refuse_foreign",
    "release_staging",
    "relocate_schema_paths",
    "remove_abandoned_stagings",
    "remove_files",
    "repoint_schema_paths",
    "rewrite_offset_conf",
    "rewrite_offset_watermark",
    "rewrite_operator_metadata",
    "run_move",
    "scan_checkpoint",
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
    "write_quarantine_marker",
    "write_recovery_marker",
    "write_sink_transaction",
    "zip_references",
]
