"""A Delta table's snapshot as Delta's own protocol gives it, through delta-rs (the `deltalake` package).

Why delta-rs and not a reader of our own, nor Delta's DeltaLog in the JVM: it implements the protocol (classic,
multi-part and v2 checkpoints with sidecars, deletion vectors applied on read, column mapping, in-commit
timestamps) and refuses a reader feature it does not know instead of misreading it; it needs no JVM, so `audit`,
`checkpoint inspect` and `recover`'s plan read a table the same way with or without Spark, over Spark Connect too
(DeltaLog is reached only through py4j). It opens local folders, S3 and Azure (object_store; `wasbs://` is
reached as the same container over the Blob endpoint). What it does not give, each commit's own actions (which
files a batch added under which transaction), is read from the commit files by sinks/delta/log.py, behind the
protocol gate of sinks/delta/protocol.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from tidemark.compat import UTC
from tidemark.errors import CheckpointError, StorageError, TidemarkError, UsageError
from tidemark.storage import parse_location

if TYPE_CHECKING:
    from deltalake import DeltaTable


@dataclass(frozen=True)
class Protocol:
    """A table's protocol action: the reader and writer versions and, from versions 3/7, their named features."""

    min_reader: int
    min_writer: int
    reader_features: tuple[str, ...]
    writer_features: tuple[str, ...]


@dataclass(frozen=True)
class LiveFile:
    """An active data file (path below the table, decoded) with its partition values and deletion vector."""

    path: str
    size: int
    rows: int | None  # rows its stats give at write time, before any deletion vector
    partition_values: dict[str, Any]
    deleted_rows: int  # rows a deletion vector removed (0: none)


@dataclass(frozen=True)
class TableSnapshot:
    """The table at its newest version, as delta-rs reads it."""

    uri: str
    version: int
    table_id: str
    protocol: Protocol
    partition_columns: tuple[str, ...]
    configuration: dict[str, str]
    files: tuple[LiveFile, ...]
    columns: tuple[str, ...] = ()  # the table's top-level columns
    table: Any = field(default=None, repr=False, compare=False)  # delta-rs' DeltaTable it was read from, for more

    @property
    def rows(self) -> int | None:
        """Rows the table's readers read, None when a file's stats lack a count."""
        if any(f.rows is None for f in self.files):
            return None
        return sum((f.rows or 0) - f.deleted_rows for f in self.files)

    @property
    def has_deletion_vectors(self) -> bool:
        """True when some active file has rows a deletion vector removed."""
        return any(f.deleted_rows for f in self.files)


def open_table(path: str) -> DeltaTable | None:
    """delta-rs' view of the table at path, None when there is no Delta table there; one line when it cannot be
    read (a reader feature delta-rs does not know, a damaged log, a store it cannot reach)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from tidemark.storage.object_store import object_store_target

    uri, options = object_store_target(parse_location(path))
    try:
        return DeltaTable(uri, storage_options=options or None)
    except TableNotFoundError:
        return None
    except Exception as exc:
        raise _unreadable(path, exc) from exc


def _unreadable(path: str, exc: BaseException) -> TidemarkError:
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    if "unsupported" in first.lower() and ("feature" in first.lower() or "protocol" in first.lower()):
        # The protocol gate's refusal (exit 2) for a reader feature delta-rs itself does not know.
        return UsageError(
            f"the Delta table {path} uses a reader feature tidemark does not vouch for ({first[:200]}): it will not "
            "read or write it (nothing was written). docs/delta.md lists the features it handles"
        )
    if isinstance(exc, OSError | StorageError):
        return CheckpointError(f"cannot read the Delta table {path}: {first[:300]}")
    return CheckpointError(f"cannot read the Delta table {path} ({type(exc).__name__}): {first[:300]}")


def protocol_of(table: DeltaTable) -> Protocol:
    """The table's protocol."""
    found = table.protocol()
    return Protocol(
        found.min_reader_version,
        found.min_writer_version,
        tuple(found.reader_features or ()),
        tuple(found.writer_features or ()),
    )


def read_table_snapshot(path: str) -> TableSnapshot | None:
    """The newest snapshot of the table at path (its active files with their partition values and deletion
    vectors), None when there is no Delta table there."""
    import pyarrow as pa

    table = open_table(path)
    if table is None:
        return None
    metadata = table.metadata()
    try:
        actions = pa.table(table.get_add_actions(flatten=True))
    except Exception as exc:
        raise _unreadable(path, exc) from exc
    partitions = [c for c in actions.column_names if c.startswith("partition.")]
    deleted = _deleted_rows(path, table)
    files = []
    for row in actions.to_pylist():
        values = {name.removeprefix("partition."): _utc(row[name]) for name in partitions}
        records = row.get("num_records")
        rel = unquote(str(row["path"]))  # the log keeps it URI-encoded
        files.append(
            LiveFile(
                path=rel,
                size=int(row.get("size_bytes") or 0),
                rows=None if records is None else int(records),
                partition_values=values,
                deleted_rows=deleted.get(rel, 0),
            )
        )
    return TableSnapshot(
        uri=path,
        version=int(table.version()),
        table_id=str(metadata.id),
        protocol=protocol_of(table),
        partition_columns=tuple(metadata.partition_columns),
        configuration=dict(metadata.configuration or {}),
        files=tuple(files),
        columns=tuple(column.name for column in table.schema().fields),
        table=table,
    )


def _deleted_rows(path: str, table: DeltaTable) -> dict[str, int]:
    """Rows each file's deletion vector removes, by file (below the table); empty for a table without them."""
    import pyarrow as pa

    readers = protocol_of(table).reader_features
    if "deletionVectors" not in readers:
        return {}
    try:
        vectors = pa.RecordBatchReader.from_stream(table.deletion_vectors()).read_all()  # GIL let go: read_rows
    except Exception as exc:
        raise _unreadable(path, exc) from exc
    root = table.table_uri.rstrip("/") + "/"
    found: dict[str, int] = {}
    pairs = zip(vectors.column("filepath").to_pylist(), vectors.column("selection_vector").to_pylist(), strict=True)
    for uri, keep in pairs:
        rel = unquote(str(uri).removeprefix(root).removeprefix("file://"))
        found[rel] = sum(1 for kept in keep if not kept)
    return found


def _utc(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def read_rows(path: str, columns: list[str], table: DeltaTable | None = None) -> Any:
    """The table's rows (deletion vectors applied) projected on columns (none: every column), as a pyarrow Table;
    table: delta-rs' view of it already opened (a snapshot's), else it is opened here."""
    import pyarrow as pa

    table = table if table is not None else open_table(path)
    if table is None:
        return pa.table({c: pa.array([], pa.null()) for c in columns})
    try:
        # Through pyarrow's reader, which lets go of the GIL while delta-rs fetches and decodes (arro3's read_all
        # holds it: a Python thread of this process serving the store, a test's proxy, then starved).
        return pa.RecordBatchReader.from_stream(table.scan(columns=columns or None)).read_all()
    except Exception as exc:
        raise _unreadable(path, exc) from exc


def transaction_version(path: str, app_id: str) -> int | None:
    """The newest transaction version the table holds for app_id (Delta's SetTransaction), None for none."""
    table = open_table(path)
    if table is None:
        return None
    try:
        version = table.transaction_version(app_id)
    except Exception as exc:
        raise _unreadable(path, exc) from exc
    return None if version is None else int(version)
