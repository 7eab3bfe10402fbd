"""The file sink's `_spark_metadata` log: how many entries, and how big the compact file has grown."""

from __future__ import annotations

import os
from typing import Any

from tidemark.checkpoint.fs import Backend, CheckpointFS, LocalFS, open_fs
from tidemark.checkpoint.layout import SINK_LOG_DIR, sink_log_batch
from tidemark.checkpoint.report import SinkReport
from tidemark.errors import CheckpointError

_CHUNK = 1024 * 1024


def _count_lines(fs: CheckpointFS, rel: str) -> int:
    newlines = 0
    last = b"\n"
    if isinstance(fs, LocalFS):
        # Streamed: a compact file can be larger than the memory we allow ourselves.
        with open(os.path.join(fs.root, *rel.split("/")), "rb") as handle:
            while chunk := handle.read(_CHUNK):
                newlines += chunk.count(b"\n")
                last = chunk[-1:]
    else:
        data = fs.read_bytes(rel) or b""
        newlines = data.count(b"\n")
        last = data[-1:] or last
    return newlines + (0 if last == b"\n" else 1)


def inspect_sink(path: str, backend: Backend = "auto", spark: Any | None = None) -> SinkReport:
    """Summarise `<path>/_spark_metadata` of a file sink output folder."""
    fs = open_fs(path, backend, spark)
    listing = fs.list_dir(SINK_LOG_DIR)
    if listing is None:
        msg = f"{path} has no {SINK_LOG_DIR} folder: pass the output folder of a file sink to --sink"
        raise CheckpointError(msg)
    entries: list[tuple[int, bool, str, int]] = []
    for name, size in listing.files:
        parsed = sink_log_batch(name)
        if parsed is not None:
            entries.append((parsed[0], parsed[1], name, size))
    entries.sort()
    compacts = [e for e in entries if e[1]]
    latest_compact = compacts[-1] if compacts else None
    files_in_compact = 0
    if latest_compact is not None:
        # Line 1 is the version ("v1"); every other line is one output file.
        files_in_compact = max(0, _count_lines(fs, f"{SINK_LOG_DIR}/{latest_compact[2]}") - 1)
    return SinkReport(
        path=path,
        entries=len(entries),
        latest_batch=entries[-1][0] if entries else None,
        latest_compact_batch=latest_compact[0] if latest_compact else None,
        compact_bytes=latest_compact[3] if latest_compact else 0,
        files_in_compact=files_in_compact,
        bytes_total=sum(e[3] for e in entries),
    )
