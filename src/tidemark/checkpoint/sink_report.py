"""The sink part of `checkpoint inspect --sink`: how big a file sink's `_spark_metadata` has grown, or what a
Delta table holds (its version, its files, the transaction this checkpoint writes it with)."""

from __future__ import annotations

from typing import Any

from tidemark.checkpoint.report import DeltaSinkReport, SinkReport
from tidemark.formats import is_delta_table, read_sink_transaction, read_snapshot, sink_entries_in, sink_log_files
from tidemark.storage import Backend, Storage, open_storage


def is_delta_sink(path: str) -> bool:
    """True when the folder is a Delta table (it has a `_delta_log` with a commit)."""
    return is_delta_table(open_storage(path))


def inspect_delta_sink(path: str, checkpoint: Storage) -> DeltaSinkReport:
    """What a Delta table sink holds, and the newest batch of this checkpoint in it (read from its log)."""
    snapshot = read_snapshot(open_storage(path))
    transaction = read_sink_transaction(checkpoint)
    app_id = transaction.app_id if transaction is not None else None
    version = snapshot.transactions.get(app_id) if app_id is not None else None
    counts = [f.rows for f in snapshot.files.values()]
    return DeltaSinkReport(
        path=path,
        version=snapshot.version if snapshot.version is not None else -1,
        files=len(snapshot.files),
        bytes_total=sum(f.size for f in snapshot.files.values()),
        rows=None if any(c is None for c in counts) else sum(c for c in counts if c is not None),
        checkpoint_version=snapshot.checkpoint_version,
        oldest_commit=snapshot.oldest_commit,
        transactions=dict(snapshot.transactions),
        app_id=app_id,
        last_batch=transaction.batch_of(version) if transaction is not None and version is not None else None,
    )


def inspect_sink(path: str, backend: Backend = "auto", spark: Any | None = None) -> SinkReport:
    """Summarise the sink log of a file sink output folder."""
    files = sink_log_files(path, backend, spark)
    compacts = [f for f in files if f.compact]
    latest_compact = compacts[-1] if compacts else None
    return SinkReport(
        path=path,
        entries=len(files),
        latest_batch=files[-1].batch if files else None,
        latest_compact_batch=latest_compact.batch if latest_compact else None,
        compact_bytes=latest_compact.bytes if latest_compact else 0,
        files_in_compact=sink_entries_in(path, latest_compact, backend, spark) if latest_compact else 0,
        bytes_total=sum(f.bytes for f in files),
        batches=[f.batch for f in files],
    )
