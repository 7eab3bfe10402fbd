"""The sink part of `checkpoint inspect --sink`: how big a file sink's `_spark_metadata` has grown, or what a
Delta table holds (its version, its files, the transaction this checkpoint writes it with)."""

from __future__ import annotations

from typing import Any

from tidemark.checkpoint.report import SinkReport
from tidemark.formats import sink_entries_in, sink_log_files
from tidemark.sinks.delta import DeltaSink, DeltaSinkReport, inspect_table
from tidemark.storage import Backend, Storage, open_storage


def is_delta_sink(path: str) -> bool:
    """True when the folder is a Delta table (the Delta connector claims it)."""
    return DeltaSink.claims(open_storage(path))


def inspect_delta_sink(path: str, checkpoint: Storage) -> DeltaSinkReport:
    """What a Delta table sink holds, and the newest batch of this checkpoint in it (the Delta connector reads it)."""
    return inspect_table(path, checkpoint)


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
