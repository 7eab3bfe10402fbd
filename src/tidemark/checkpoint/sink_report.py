"""The sink log part of `checkpoint inspect --sink`: how big the file sink's `_spark_metadata` has grown."""

from __future__ import annotations

from typing import Any

from tidemark.checkpoint.report import SinkReport
from tidemark.formats import sink_entries_in, sink_log_files
from tidemark.storage import Backend


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
    )
