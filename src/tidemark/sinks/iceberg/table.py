"""An Iceberg table as pyiceberg reads it, without a JVM: the one place that opens a table's metadata.

A Hadoop catalog keeps a table at `<warehouse>/<namespace>/<table>`: its metadata files `metadata/v<N>.metadata.json`
and `metadata/version-hint.text` naming the newest N. pyiceberg has no Hadoop catalog, so the table is opened from
that metadata file (`StaticTable`); it then answers the snapshots, their summaries (where tidemark's own keys are),
the live files with their partition values, and the rows with position deletes applied. Equality deletes, which
pyiceberg 0.12 does not apply, are refused in one line rather than read wrong.

Another catalog's table (a JDBC catalog's: `metadata/<NNNNN>-<uuid>.metadata.json`, no version hint) is current only
as its catalog says: its folder alone does not tell which metadata file is the table (a failed commit leaves a newer
one the catalog never named), so it is refused in one line, and the metadata file the catalog names is opened as
given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidemark.errors import CheckpointError
from tidemark.storage import Storage, open_storage

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from tidemark.sinks.iceberg.catalog import CatalogTable

METADATA = "metadata"
METADATA_SUFFIX = ".metadata.json"
VERSION_HINT = f"{METADATA}/version-hint.text"
# tidemark's keys in each batch's snapshot summary (written as `snapshot-property.<key>` options by the sink).
APP_KEY = "tidemark.app"
VERSION_KEY = "tidemark.version"
BATCH_KEY = "tidemark.batch"
# Data file contents in Iceberg's manifests.
DATA, POSITION_DELETES, EQUALITY_DELETES = 0, 1, 2


@dataclass(frozen=True)
class Commit:
    """One snapshot of the table's current lineage, with tidemark's keys when a tidemark pipeline made it."""

    snapshot_id: int
    parent_id: int | None
    sequence: int
    operation: str  # append, replace (compaction), overwrite, delete
    app_id: str | None
    version: int | None  # tidemark's transaction version (base + batch)
    added_files: int
    added_rows: int | None
    timestamp_ms: int


def is_metadata_file(path: str) -> bool:
    """True when path names one metadata file of a table (`*.metadata.json`), not a table's folder."""
    return path.rstrip("/").endswith(METADATA_SUFFIX)


def has_metadata(folder: Storage) -> bool:
    """True when the folder is an Iceberg table (its metadata folder holds a `*.metadata.json`), or is one of its
    metadata files."""
    if is_metadata_file(folder.uri()):
        return folder.exists("")
    listing = folder.list_dir(METADATA)
    return listing is not None and any(name.endswith(METADATA_SUFFIX) for name, _ in listing.files)


def _versioned(version: int) -> str:
    return f"{METADATA}/v{version}{METADATA_SUFFIX}"


def metadata_file(folder: Storage) -> str | None:
    """The newest metadata file of a Hadoop catalog table (version-hint.text and any v<N+1> after it, else the
    highest v<N>), None for no table; one line for a table whose metadata files only its catalog orders (no hint, no
    v<N>).

    Past the hint, as Iceberg's own HadoopTableOperations reads: its commit renames v<N+1>.metadata.json into place,
    then writes the hint, so a driver killed between the two leaves a committed v<N+1> the hint does not name. Read
    at the hint alone, that batch's snapshot would be missing, and the batch appended twice."""
    hint = folder.read_bytes(VERSION_HINT)
    if hint is not None and hint.strip().isdigit():
        version = int(hint.strip())
        if folder.exists(_versioned(version)):
            while folder.exists(_versioned(version + 1)):
                version += 1
            return folder.uri(_versioned(version))
    listing = folder.list_dir(METADATA)
    if listing is None:
        return None
    names = [name for name, _ in listing.files if name.endswith(METADATA_SUFFIX)]
    numbers = [name[1 : -len(METADATA_SUFFIX)] for name in names if name.startswith("v")]
    versions = [int(n) for n in numbers if n.isdigit()]
    if versions:
        return folder.uri(_versioned(max(versions)))
    if names:
        msg = (
            f"the Iceberg table at {folder.uri()} has no version-hint.text: its current metadata file is the one its "
            f"catalog names (a JDBC catalog's table), which its folder cannot tell among {len(names)}; give that "
            "metadata file instead of the folder (the newest `file` of the table's metadata_log_entries in Spark, "
            "Table.metadata_location in pyiceberg)"
        )
        raise CheckpointError(msg)
    return None


def open_table(path: str, catalog: CatalogTable | None = None) -> Table | None:
    """The table at path as pyiceberg reads it, None when there is no table yet: from its newest metadata file in a
    Hadoop catalog, from the metadata file the catalog names for a JDBC catalog's table (catalog), or from the
    metadata file path names."""
    from pyiceberg.table import StaticTable

    from tidemark.sinks.iceberg.catalog import FILE_IO

    if catalog is not None:
        return catalog.open()

    store = open_storage(path)
    if is_metadata_file(path):
        found: str | None = store.uri() if store.exists("") else None
    else:
        found = metadata_file(store)
    if found is None:
        return None
    try:
        return StaticTable.from_metadata(found, properties=FILE_IO)
    except Exception as exc:
        msg = f"cannot read the Iceberg table at {path} ({found}): {str(exc).splitlines()[0][:300]}"
        raise CheckpointError(msg) from exc


def lineage(table: Table) -> list[Commit]:
    """The current snapshot and its ancestors, oldest first (a rolled-back or expired snapshot is not in it)."""
    from pyiceberg.table.snapshots import ancestors_of

    commits = []
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        extra: dict[str, str] = dict(summary.additional_properties) if summary is not None else {}
        version = extra.get(VERSION_KEY)
        rows = extra.get("added-records", "0" if extra.get("added-data-files", "0") == "0" else None)
        commits.append(
            Commit(
                snapshot_id=snapshot.snapshot_id,
                parent_id=snapshot.parent_snapshot_id,
                sequence=int(snapshot.sequence_number or 0),
                operation=summary.operation.value if summary is not None else "unknown",
                app_id=extra.get(APP_KEY),
                version=int(version) if version is not None and version.isdigit() else None,
                added_files=int(extra.get("added-data-files", "0") or 0),
                added_rows=int(rows) if rows is not None and rows.isdigit() else None,
                timestamp_ms=snapshot.timestamp_ms,
            )
        )
    return commits[::-1]


def newest_version(table: Table | None, app_id: str) -> int | None:
    """The newest transaction version of app_id in the table's current lineage, None when it has none."""
    if table is None:
        return None
    versions = [c.version for c in lineage(table) if c.app_id == app_id and c.version is not None]
    return max(versions) if versions else None


def live_files(table: Table) -> Any:
    """The live data and delete files of the current snapshot (pyiceberg's `inspect.files()`, a pyarrow Table)."""
    if table.current_snapshot() is None:
        import pyarrow as pa

        return pa.table({"content": pa.array([], pa.int8()), "file_path": pa.array([], pa.string())})
    return table.inspect.files()


def require_readable(path: str, files: Any, what: str) -> None:
    """One line when the table has equality deletes, which pyiceberg does not apply (its rows would be read wrong)."""
    contents = files.column("content").to_pylist()
    if EQUALITY_DELETES in contents:
        msg = (
            f"the Iceberg table at {path} has equality delete files, which tidemark's reader (pyiceberg) cannot "
            f"apply: tidemark cannot {what}; compact it first (CALL <catalog>.system.rewrite_data_files)"
        )
        raise CheckpointError(msg)


def read_rows(table: Table, columns: list[str]) -> Any:
    """The table's rows projected on columns (position deletes applied), as a pyarrow Table."""
    import pyarrow as pa

    if table.current_snapshot() is None:
        schema = table.schema().as_arrow()
        return pa.table({c: pa.array([], schema.field(c).type) for c in columns})
    return table.scan(selected_fields=tuple(columns)).to_arrow()


def below(path: str, file_path: str) -> str:
    """A data file's path relative to the table's folder (Spark records `file:` URIs)."""
    root = path.rstrip("/")
    for prefix in ("file://", "file:"):
        if file_path.startswith(prefix) and not root.startswith("file:"):
            file_path = file_path[len(prefix) :]
            break
    return file_path[len(root) + 1 :] if file_path.startswith(root + "/") else file_path


def added_files(table: Table, snapshot_id: int, path: str) -> tuple[str, ...]:
    """The data files a snapshot added, below the table (its own manifests' ADDED entries)."""
    from pyiceberg.manifest import ManifestEntryStatus

    snapshot = table.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return ()
    found = []
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.status == ManifestEntryStatus.ADDED:
                found.append(below(path, entry.data_file.file_path))
    return tuple(sorted(found))
