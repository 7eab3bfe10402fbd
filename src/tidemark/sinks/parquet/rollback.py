"""What a rollback takes out of a Parquet sink: its log files after the batch and the data files of later batches."""

from __future__ import annotations

import math

from tidemark.formats import Checkpoint
from tidemark.sinks.parquet.ledger import ledger_files
from tidemark.sinks.parquet.log import companions, data_files, log_files_after, query_log
from tidemark.storage import Storage


def sink_files_after(checkpoint: Checkpoint, sink: Storage, batch: int) -> tuple[list[str], list[str]] | None:
    """What a rollback to committed `batch` takes out of the checkpoint's file sink (paths below the sink folder):
    (its log files after `batch`, the data files of the batches after it, each with its checksums); None when the
    sink has no log.

    A data file belongs to a later batch when tidemark's ledger or the newest sink log says so; a file listed
    nowhere counts as later only when it is newer than the commit of `batch` (an expired log entry names an older
    one).
    """
    later_log = log_files_after(sink, batch)
    if later_log is None:
        return None
    present = {e.rel for e in sink.list_files()}
    kept = set(query_log(checkpoint, sink, up_to=batch).files)
    by_ledger = ledger_files(checkpoint.store)
    newest = set(query_log(checkpoint, sink).files)
    committed_at = checkpoint.commit_mtime(batch)
    cutoff = math.floor(committed_at) if committed_at is not None else None
    data: list[str] = []
    for file in data_files(sink):
        if file.rel in kept:
            continue
        writer = by_ledger.get(file.rel)
        if writer is not None:
            later = writer > batch
        elif file.rel in newest:
            later = True
        else:
            later = cutoff is None or (file.mtime is not None and math.floor(file.mtime) >= cutoff)
        if later:
            data += companions(file.rel, present)
    return later_log, data
