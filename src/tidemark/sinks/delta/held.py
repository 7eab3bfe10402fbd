"""Which windows a Delta table holds, read from the table: partition values of its active files where the window
start is a partition column (and no deletion vector hides rows), else the rows themselves (a projection of the
window column, deletion vectors applied). Never from file names: a table written with Delta's random file
prefixes, without partitions, by another job or compacted by OPTIMIZE holds its windows all the same."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tidemark.compat import UTC
from tidemark.errors import CheckpointError
from tidemark.sinks.base import HeldWindows
from tidemark.sinks.delta.protocol import require_supported
from tidemark.sinks.delta.table import TableSnapshot, read_rows, read_table_snapshot

WINDOW_COLUMN = "windowStart"
WINDOW_STRUCT = "window"  # a plain Spark job's `window(...)` column, kept as a struct


def held_windows(path: str, window_column: str = WINDOW_COLUMN) -> HeldWindows:
    """The window starts the table at path holds (an absent table holds none)."""
    snapshot = read_table_snapshot(path)
    if snapshot is None:
        return HeldWindows(uri=path, files=(), rows=0, starts=(), read_from="no Delta table yet")
    require_supported(path, snapshot.protocol, "vouch for what it holds")
    files = tuple(f.path for f in snapshot.files)
    if window_column in snapshot.partition_columns and not snapshot.has_deletion_vectors:
        starts = {
            _start(f.partition_values.get(window_column))
            for f in snapshot.files
            if (f.rows is None or f.rows > 0) and f.partition_values.get(window_column) is not None
        }
        rows = snapshot.rows
        return HeldWindows(
            uri=path,
            files=files,
            rows=rows if rows is not None else -1,
            starts=tuple(sorted(starts)),
            read_from=f"the partition values of {len(files)} active file(s) (table version {snapshot.version})",
            table_id=snapshot.table_id,
        )
    return _from_rows(path, snapshot, window_column, files)


def _from_rows(path: str, snapshot: TableSnapshot, window_column: str, files: tuple[str, ...]) -> HeldWindows:
    import pyarrow.compute as pc

    names = set(snapshot.columns)
    if window_column in names:
        column, read = window_column, [window_column]
    elif WINDOW_STRUCT in names:
        column, read = f"{WINDOW_STRUCT}.start", [WINDOW_STRUCT]
    else:
        msg = (
            f"the Delta table {path} has no {window_column} column nor a window struct: tidemark cannot tell which "
            "windows it holds"
        )
        raise CheckpointError(msg)
    table = read_rows(path, read, snapshot.table)
    values = table.column(read[0])
    if column != read[0]:
        values = pc.struct_field(values, "start")
    starts = {_start(v) for v in pc.unique(values).to_pylist() if v is not None}
    how = "deletion vectors applied" if snapshot.has_deletion_vectors else "no deletion vectors"
    return HeldWindows(
        uri=path,
        files=files,
        rows=table.num_rows,
        starts=tuple(sorted(starts)),
        read_from=f"the {column} of the table's rows ({how}, table version {snapshot.version})",
        table_id=snapshot.table_id,
    )


def _start(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        msg = f"a window start that is not a timestamp: {value!r}"
        raise CheckpointError(msg)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
