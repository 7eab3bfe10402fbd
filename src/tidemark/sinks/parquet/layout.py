"""What a Parquet sink folder holds on disk: its Hive partition columns and the columns its files carry.

Commands that change a sink (recover, run over an existing one) and audit compare this with what the config
says before they touch anything: a sink another job wrote (unpartitioned, partitioned by another column, other
columns) is refused in one line instead of being half-rewritten.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime

from tidemark.compat import UTC
from tidemark.errors import StorageError
from tidemark.sinks.base import SinkWindows
from tidemark.sinks.parquet.log import data_files
from tidemark.storage import Storage

# Footers read at most: spread over the folder, so every partition layout is seen on a large sink too.
MAX_FOOTERS = 400


@dataclass(frozen=True)
class SinkLayout:
    """The partition folders and file columns of a sink's data files."""

    uri: str
    files: int
    partition_columns: tuple[str, ...]  # in folder order, from the first file that has any
    layouts: tuple[tuple[str, ...], ...]  # every distinct partition-column path found
    unpartitioned: int  # data files directly in the sink folder
    columns: tuple[str, ...]  # the columns of the most common file schema
    schemas: int  # distinct file schemas among the footers read
    footers_read: int
    example: str | None  # a data file, for messages


@dataclass(frozen=True)
class CommittedFiles:
    """Which of a sink's data files are committed, by the one rule every reader of a sink uses."""

    present: tuple[str, ...]  # every data file below the sink folder
    committed: tuple[str, ...]
    uncommitted: tuple[str, ...]  # present, but not listed by a log that lists this folder's files
    copied: bool  # the log names only another folder's files: a sink copied or moved from there


def committed_data_files(sink: Storage, empty: Callable[[list[int]], Collection[int]] | None = None) -> CommittedFiles:
    """The sink's committed data files: what its `_spark_metadata` log lists, as a Spark reader sees them.

    Without a log every file counts (a sink no streaming query wrote). A log that names files of another folder and
    none of this one belongs to a sink copied from there: its entries cannot tell committed from not, so every file
    counts (and `copied` says so). Otherwise only the listed files count; a log that lists no file yet (the batches
    so far emitted nothing) means nothing is committed, and a killed batch's file (often empty) is never read.
    A folder another connector claims (a Delta table: sinks.claiming) is read by that connector, never here.
    empty: the batches the checkpoint proves wrote nothing (`sinklog.read_log`).
    """
    from tidemark.sinks.parquet.log import read_log

    present = tuple(e.rel for e in data_files(sink))
    log = read_log(sink, empty=empty)
    copied = log.exists and not log.files and bool(log.outside)
    if not log.exists or copied:
        return CommittedFiles(present, present, (), copied)
    return CommittedFiles(
        present,
        tuple(rel for rel in present if rel in log.files),
        tuple(rel for rel in present if rel not in log.files),
        copied,
    )


def _partition_columns(rel: str) -> tuple[str, ...]:
    return tuple(part.split("=", 1)[0] for part in rel.split("/")[:-1] if "=" in part)


def read_sink_layout(
    sink: Storage, max_footers: int = MAX_FOOTERS, empty: Callable[[list[int]], Collection[int]] | None = None
) -> SinkLayout:
    """List the sink's data files and read the Parquet footers of up to max_footers of them (no data pages).

    Footers are read only from committed files (`committed_data_files`): a killed batch's file is not part of the sink,
    and `run` moves it aside at start.
    """
    import pyarrow.parquet as pq

    found = committed_data_files(sink, empty)
    files = list(found.present)
    layouts = Counter(_partition_columns(rel) for rel in files)
    committed = list(found.committed)
    step = max(1, len(committed) // max_footers)
    sample = committed[::step][:max_footers]
    seen_layouts = {_partition_columns(rel) for rel in sample}
    # One footer from every partition layout, however rare.
    sample += [
        next(r for r in committed if _partition_columns(r) == layout)
        for layout in layouts
        if layout not in seen_layouts and any(_partition_columns(r) == layout for r in committed)
    ]
    schemas: Counter[tuple[str, ...]] = Counter()
    if sample:
        filesystem, base = sink.arrow()
        for rel in sample:
            try:
                schema = pq.read_schema(f"{base}/{rel}", filesystem=filesystem)
            except Exception as exc:  # not Parquet, or torn: the sink cannot be what the config describes
                msg = f"{sink.uri(rel)} is not a readable Parquet file ({type(exc).__name__}): {str(exc)[:200]}"
                raise StorageError(msg) from exc
            schemas[tuple(schema.names)] += 1
    partitioned = [layout for layout in layouts if layout]
    return SinkLayout(
        uri=sink.uri(),
        files=len(files),
        partition_columns=partitioned[0] if partitioned else (),
        layouts=tuple(sorted(layouts)),
        unpartitioned=layouts.get((), 0),
        columns=schemas.most_common(1)[0][0] if schemas else (),
        schemas=len(schemas),
        footers_read=len(sample),
        example=files[0] if files else None,
    )


def sink_windows(sink: Storage) -> SinkWindows:
    """Read the window starts of every committed data file (`committed_data_files`)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from tidemark.sinks.parquet.log import partition_start

    found = committed_data_files(sink)
    committed = found.committed
    newest: datetime | None = None
    rows = 0
    column: str | None = None
    filesystem, base = sink.arrow() if committed else (None, "")
    for rel in committed:
        try:
            table = pq.read_table(f"{base}/{rel}", filesystem=filesystem, partitioning=None)
        except Exception as exc:  # not Parquet, torn, or a schema pyarrow refuses
            msg = f"{sink.uri(rel)} is not a readable Parquet file ({type(exc).__name__}): {str(exc)[:200]}"
            raise StorageError(msg) from exc
        rows += table.num_rows
        if table.num_rows == 0:
            continue
        folder_start = partition_start(rel)
        if folder_start is not None:
            start, column = folder_start, "windowStart (partition folders)"
        elif "windowStart" in table.column_names:
            start, column = pc.max(table.column("windowStart")).as_py(), "windowStart"
        elif "window" in table.column_names:
            start, column = pc.max(pc.struct_field(table.column("window"), "start")).as_py(), "window.start"
        else:
            msg = (
                f"{sink.uri(rel)} has no windowStart column, window struct or windowStart=... folder: "
                "cannot tell which windows the old sink holds"
            )
            raise StorageError(msg)
        start = start if start.tzinfo is not None else start.replace(tzinfo=UTC)
        newest = start if newest is None or start > newest else newest
    return SinkWindows(sink.uri(), len(committed), rows, newest, column, found.uncommitted, found.copied)


def layout_problem(layout: SinkLayout, partition_by: tuple[str, ...], expected: tuple[str, ...] | None) -> str | None:
    """How the folder's files differ from what the config writes (its partition columns, its query's columns:
    None when code decides them), None when they match."""
    wanted = partition_by
    if wanted and layout.unpartitioned:
        return (
            f"{layout.unpartitioned} of its {layout.files} data files are not in {'/'.join(wanted)}=... folders "
            f"(e.g. {layout.example}): the config says it is partitioned by {', '.join(wanted)}"
        )
    found = [layout_ for layout_ in layout.layouts if layout_ != wanted]
    if found:
        shown = ", ".join("/".join(f"{c}=..." for c in f) or "no partition folders" for f in found[:3])
        return f"its files are partitioned as {shown}; the config writes {'/'.join(wanted) or 'no partitions'}"
    if layout.schemas > 1:
        return f"its files have {layout.schemas} different column sets (read from {layout.footers_read} files)"
    if expected is None or not layout.footers_read:  # no committed file: no columns to compare
        return None
    in_files = set(layout.columns) | set(layout.partition_columns)
    missing = [c for c in expected if c not in in_files]
    extra = sorted(in_files - set(expected))
    if missing or extra:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"not written by this config: {', '.join(extra)}"] if extra else []
        )
        return f"its columns differ from the config's query ({'; '.join(parts)})"
    return None
