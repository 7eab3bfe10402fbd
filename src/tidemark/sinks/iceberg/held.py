"""Which windows an Iceberg table holds, read from the table: the partition values of its live data files where the
window start is an identity partition field and no delete file hides rows, else the rows themselves (a projection
of the window column, position deletes applied). Never from file names: a table another job wrote, unpartitioned or
compacted, holds its windows all the same."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.compat import UTC
from tidemark.errors import CheckpointError
from tidemark.sinks.base import HeldWindows
from tidemark.sinks.iceberg.table import DATA, below, live_files, open_table, read_rows, require_readable

if TYPE_CHECKING:
    from tidemark.sinks.iceberg.catalog import CatalogTable

WINDOW_COLUMN = "windowStart"
WINDOW_STRUCT = "window"  # a plain Spark job's `window(...)` column, kept as a struct


def identity_field(table: Any, column: str) -> str | None:
    """The name of the current spec's identity partition field on column, None when it has none."""
    from pyiceberg.transforms import IdentityTransform

    schema = table.schema()
    for field in table.spec().fields:
        if isinstance(field.transform, IdentityTransform) and schema.find_column_name(field.source_id) == column:
            return str(field.name)
    return None


def held_windows(path: str, window_column: str = WINDOW_COLUMN, catalog: CatalogTable | None = None) -> HeldWindows:
    """The window starts the table at path holds (an absent table holds none)."""
    table = open_table(path, catalog)
    if table is None:
        return HeldWindows(uri=path, files=(), rows=0, starts=(), read_from="no Iceberg table yet")
    snapshot = table.current_snapshot()
    files = live_files(table)
    require_readable(path, files, "say which windows it holds")
    contents = files.column("content").to_pylist()
    paths = files.column("file_path").to_pylist()
    data = tuple(sorted(below(path, p) for p, c in zip(paths, contents, strict=True) if c == DATA))
    field = identity_field(table, window_column)
    version = f"snapshot {snapshot.snapshot_id}" if snapshot is not None else "no snapshot"
    if field is not None and all(c == DATA for c in contents):
        partitions = files.column("partition").to_pylist() if files.num_rows else []
        counts = files.column("record_count").to_pylist() if files.num_rows else []
        starts = {
            _start(p[field]) for p, n in zip(partitions, counts, strict=True) if n and p and p.get(field) is not None
        }
        return HeldWindows(
            uri=path,
            files=data,
            rows=sum(int(n) for n in counts),
            starts=tuple(sorted(starts)),
            read_from=f"the partition values of {len(data)} live data file(s) ({version})",
            table_id=str(table.metadata.table_uuid),
        )
    return _from_rows(path, table, window_column, data, version)


def _from_rows(path: str, table: Any, window_column: str, files: tuple[str, ...], version: str) -> HeldWindows:
    import pyarrow.compute as pc

    names = {f.name for f in table.schema().fields}
    if window_column in names:
        column, read = window_column, [window_column]
    elif WINDOW_STRUCT in names:
        column, read = f"{WINDOW_STRUCT}.start", [WINDOW_STRUCT]
    else:
        msg = (
            f"the Iceberg table at {path} has no {window_column} column nor a window struct: tidemark cannot tell "
            "which windows it holds"
        )
        raise CheckpointError(msg)
    rows = read_rows(table, read)
    values = rows.column(read[0])
    if column != read[0]:
        values = pc.struct_field(values, "start")
    starts = {_start(v) for v in pc.unique(values).to_pylist() if v is not None}
    return HeldWindows(
        uri=path,
        files=files,
        rows=rows.num_rows,
        starts=tuple(sorted(starts)),
        read_from=f"the {column} of the table's rows (delete files applied, {version})",
        table_id=str(table.metadata.table_uuid),
    )


def _start(value: Any) -> datetime:
    if isinstance(value, int):  # Iceberg's timestamp partition value: microseconds since the epoch
        return datetime.fromtimestamp(value / 1_000_000, tz=UTC)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        msg = f"a window start that is not a timestamp: {value!r}"
        raise CheckpointError(msg)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
