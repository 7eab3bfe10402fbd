"""What a recovery does to a Parquet sink: which files move aside (the log, a failed batch's files, the windows the
replay writes again), the per-key resume point, the repair of the new log after the replay (the recovery marker's
surviving entries), the start-of-run sweep of a killed batch's files, and the rows its readers see."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.formats import Checkpoint, read_recovery_marker, write_recovery_marker
from tidemark.sinks.base import AsideKind, HeldWindows, SinkAside, SinkCheck, SinkRecovery
from tidemark.sinks.parquet.ledger import ledger_files
from tidemark.sinks.parquet.log import (
    companions,
    data_files,
    inject_entries,
    log_folder,
    marker_paths,
    partition_start,
    query_log,
    read_log,
)
from tidemark.storage import Location, Storage, open_storage, parse_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def newest_per_key(files: list[str], sink: Storage, keys: list[str]) -> datetime | None:
    """The oldest of the keys' newest window starts among the files (by their windowStart folders)."""
    import pyarrow.parquet as pq

    filesystem, base = sink.arrow()
    newest: dict[tuple[object, ...], datetime] = {}
    for file in files:
        start = partition_start(file)
        if start is None:
            continue
        table = pq.read_table(f"{base}/{file}", columns=keys, partitioning=None, filesystem=filesystem)
        for row in zip(*(table.column(k).to_pylist() for k in keys), strict=True):
            if row not in newest or newest[row] < start:
                newest[row] = start
    return min(newest.values()) if newest else None


def recovery_cut(checkpoint: Checkpoint, sink: Storage, held: HeldWindows, resume: datetime) -> SinkRecovery:
    """The log folder moves aside (the new query starts its own), files no committed batch lists too, and the
    committed files of windows from `resume` on (the replay writes them again); the rest survives."""
    log = query_log(checkpoint, sink)
    listed = {e.rel for e in sink.list_files()}
    committed = set(held.files)
    notes: list[str] = []
    missing = len(log.files) - len(held.files)
    if missing:
        notes.append(f"{missing} file(s) the sink log lists are gone from disk; Spark readers would fail on them")
    aside: list[SinkAside] = []
    folder = log_folder(sink)
    if folder is not None and any(rel.startswith(f"{folder}/") for rel in listed):
        aside.append(SinkAside(AsideKind.LOG, folder))
    surviving: list[str] = []
    for file in data_files(sink):
        start = partition_start(file.rel)
        if file.rel not in committed:
            kind = AsideKind.FAILED_BATCH_FILE
        elif start is not None and start >= resume:
            kind = AsideKind.REWRITTEN_PARTITION_FILE
        else:
            surviving.append(file.rel)
            continue
        aside.extend(SinkAside(kind, rel) for rel in companions(file.rel, listed))
    return SinkRecovery(tuple(aside), tuple(surviving), tuple(notes))


def finish_pending(checkpoint: Location, sink: Location) -> int | None:
    """Repair the new sink log if the marker says it is pending and a batch has committed; None if not yet."""
    marker = read_recovery_marker(checkpoint)
    if marker is None or marker.injected:
        return None
    store = open_storage(sink)
    if read_log(store).latest_batch is None:
        return None
    added = inject_entries(store, marker.entries, parse_location(marker.archive))
    write_recovery_marker(checkpoint, replace(marker, injected=True))
    return added


def _floor(value: float) -> float:
    # Object stores keep whole seconds: compare at that resolution so a later file never looks older.
    return float(math.floor(value))


def failed_batch_files(checkpoint: Checkpoint, sink: Storage) -> tuple[tuple[str, ...], int]:
    """The data files (with their checksums) of a killed batch: listed by no committed batch (the sink log,
    tidemark's ledger, a recovery marker) AND written after the newest commit (file time against the commit
    file's time); and how many unlisted files are older (an expired log entry's: they stay). Nothing when the sink
    has no log."""
    if not read_log(sink).exists:
        return (), 0
    commits = checkpoint.commit_batches()
    last_mtime = checkpoint.commit_mtime(commits[-1]) if commits else None
    known = set(query_log(checkpoint, sink).files) | set(ledger_files(checkpoint.store))
    known |= marker_paths(sink.location, read_recovery_marker(checkpoint.store.location))
    failed: list[str] = []
    kept = 0
    for file in data_files(sink):
        if file.rel in known:
            continue
        # No commit at all: nothing was ever committed, so any output is a failed batch's.
        if last_mtime is None or (file.mtime is not None and _floor(file.mtime) >= _floor(last_mtime)):
            failed.append(file.rel)
        else:
            kept += 1
    if not failed:
        return (), kept
    present = {e.rel for e in sink.list_files()}
    return tuple(rel for file in failed for rel in companions(file, present)), kept


def plain_rows(sink: Storage, columns: list[str]) -> Any:
    """The rows a plain Parquet reader reads (every data file, partition values from Hive folders) on columns."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    if not data_files(sink):
        return pa.table({c: pa.array([], pa.string()) for c in columns})
    filesystem, base = sink.arrow()
    dataset = ds.dataset(base, format="parquet", partitioning="hive", filesystem=filesystem)
    return dataset.to_table(columns=columns)


def check_rows(path: str, keys: tuple[str, ...], spark: SparkSession | None) -> SinkCheck:
    """Rows and repeated keys with pyarrow and, given a session, with Spark (which reads through the log)."""
    table = plain_rows(open_storage(path), list(keys))
    frame: Any = table.to_pandas()
    duplicates = int(frame.duplicated(list(keys)).sum()) if keys else 0
    spark_rows = spark_duplicates = None
    if spark is not None:
        from pyspark.sql import functions as F

        read = spark.read.parquet(path)
        spark_rows = read.count()
        spark_duplicates = read.groupBy(*keys).count().where(F.col("count") > 1).count() if keys else 0
    return SinkCheck(int(table.num_rows), duplicates, "pyarrow", spark_rows, spark_duplicates)
