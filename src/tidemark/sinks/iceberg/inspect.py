"""`checkpoint inspect --sink` on an Iceberg table: its snapshots, live files per partition (pyiceberg), and the
newest batch of the checkpoint it holds (the checkpoint's transaction in the snapshots' summaries).

`--sink` is a Hadoop catalog's table folder (its version hint names the current metadata file), or any catalog's
metadata file as the catalog names it (a JDBC catalog's table, a table whose `location` is not under the warehouse):
a folder without a version hint is refused in one line saying so (table.py). A folder whose metadata names another
location (a table copied or moved there: its metadata still lists the other place's files) is refused too, rather
than reported as what it is not."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from tidemark.errors import CheckpointError
from tidemark.findings import Finding, Severity
from tidemark.sinks.base import SinkLimits
from tidemark.sinks.iceberg.table import DATA, is_metadata_file, lineage, live_files, open_table
from tidemark.sizes import format_size
from tidemark.storage import Storage, parse_location


@dataclass(frozen=True)
class IcebergSinkReport:
    """An Iceberg table sink, as its metadata shows it, and the transaction this checkpoint writes it with."""

    path: str
    snapshot_id: int | None  # the current snapshot
    snapshots: int  # snapshots the metadata keeps (expire_snapshots removes old ones)
    files: int  # live data files
    delete_files: int
    bytes_total: int
    rows: int  # records in the live data files (before deletes)
    files_per_partition: dict[str, int]
    app_id: str | None  # the checkpoint's own, None for a checkpoint tidemark did not start on this table
    last_batch: int | None  # the newest batch of this checkpoint the table holds
    other_snapshots: int  # in the current lineage, by other writers (a compaction, another application)
    table_id: str | None = None
    location: str | None = None  # the table's own location, as its metadata says
    metadata_file: str | None = None  # the metadata file read

    @property
    def mean_file_bytes(self) -> int:
        """Average size of a live data file."""
        return self.bytes_total // self.files if self.files else 0

    def findings(self, limits: SinkLimits) -> list[Finding]:
        """ICEBERG_SMALL_FILES when the table holds many small files (a streaming append writes one per task and
        batch), ICEBERG_UNEXPIRED_SNAPSHOTS when it keeps as many snapshots (one per batch, each pinning its files);
        each names the Iceberg procedure that fixes it."""
        found = []
        if self.files >= limits.max_table_files and self.mean_file_bytes < limits.small_file_bytes:
            message = (
                f"the Iceberg table {self.path} holds {self.files:,} live data files averaging "
                f"{format_size(self.mean_file_bytes)}: a streaming append writes one file per task and batch, and "
                "every read opens them all"
            )
            fix = (
                "compact it with Iceberg's own procedure: CALL <catalog>.system.rewrite_data_files(table => "
                "'<namespace>.<table>') (the pipeline may keep running: its appends do not conflict with it; "
                "tidemark's audit tells its `replace` snapshot apart); fewer [sink] writers or a longer trigger "
                "interval write fewer files"
            )
            found.append(Finding("ICEBERG_SMALL_FILES", Severity.WARNING, message, fix))
        if self.snapshots >= limits.max_table_files:
            message = (
                f"the Iceberg table {self.path} keeps {self.snapshots:,} snapshots (one per batch): each keeps its "
                "files on storage and its entry in every metadata file"
            )
            fix = (
                "expire the old ones with Iceberg's own procedure: CALL <catalog>.system.expire_snapshots(table => "
                "'<namespace>.<table>', older_than => TIMESTAMP '...', retain_last => 100) (tidemark checks each "
                "batch against the snapshots still kept)"
            )
            found.append(Finding("ICEBERG_UNEXPIRED_SNAPSHOTS", Severity.INFO, message, fix))
        return found

    def describe(self) -> list[tuple[str, str]]:
        """The table's snapshot and files; the transaction this checkpoint writes with; other writers."""
        lines = [
            (
                "Iceberg sink",
                f"{self.path}: snapshot {_opt(self.snapshot_id)} of {self.snapshots:,} kept, {self.files:,} live data "
                f"files ({format_size(self.bytes_total)}, {self.rows:,} rows), {self.delete_files:,} delete files, "
                f"{len(self.files_per_partition):,} partition(s)",
            )
        ]
        if self.metadata_file is not None:
            lines.append(("", f"  location {self.location}, metadata {self.metadata_file}"))
        if self.app_id is None:
            lines.append(("", "  this checkpoint keeps no Iceberg transaction (not started by tidemark on this table)"))
        else:
            lines.append(("", f"  this checkpoint writes as {self.app_id}: newest batch {_opt(self.last_batch)}"))
        if self.other_snapshots:
            lines.append(("", f"  {self.other_snapshots} snapshot(s) by other writers in the current lineage"))
        return lines

    def missing_log_entries(self, repartitioned: Collection[int]) -> dict[int, str]:
        """None: a table owes a batch that wrote nothing no snapshot entry."""
        del repartitioned
        return {}


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def inspect_table(path: str, checkpoint: Storage) -> IcebergSinkReport:
    """What the Iceberg table at path holds, and the newest batch of this checkpoint in it."""
    from tidemark.formats import read_sink_transaction

    table = open_table(path)
    if table is None:
        missing = "no such metadata file" if is_metadata_file(path) else "no metadata/*.metadata.json"
        msg = f"{path} is not an Iceberg table ({missing})"
        raise CheckpointError(msg)
    location = table.metadata.location
    if not is_metadata_file(path) and not parse_location(location).same_place(parse_location(path)):
        msg = (
            f"the Iceberg table at {path} says its location is {location} (copied or moved from there: its metadata "
            f"still lists that place's files): inspect it at {location}, or give --sink the metadata file its "
            "catalog names"
        )
        raise CheckpointError(msg)
    files = live_files(table)
    contents = files.column("content").to_pylist()
    data = [i for i, c in enumerate(contents) if c == DATA]
    sizes = files.column("file_size_in_bytes").to_pylist() if files.num_rows else []
    counts = files.column("record_count").to_pylist() if files.num_rows else []
    partitions = files.column("partition").to_pylist() if files.num_rows and "partition" in files.column_names else []
    per_partition = Counter(
        ",".join(f"{k}={v}" for k, v in sorted((partitions[i] or {}).items())) if partitions else "" for i in data
    )
    transaction = read_sink_transaction(checkpoint)
    app_id = transaction.app_id if transaction is not None else None
    commits = lineage(table)
    versions = [c.version for c in commits if app_id is not None and c.app_id == app_id and c.version is not None]
    newest = max(versions) if versions else None
    snapshot = table.current_snapshot()
    return IcebergSinkReport(
        path=path,
        snapshot_id=snapshot.snapshot_id if snapshot is not None else None,
        snapshots=len(table.metadata.snapshots),
        files=len(data),
        delete_files=len(contents) - len(data),
        bytes_total=sum(int(sizes[i]) for i in data),
        rows=sum(int(counts[i]) for i in data),
        files_per_partition=dict(sorted(per_partition.items())),
        app_id=app_id,
        last_batch=transaction.batch_of(newest) if transaction is not None and newest is not None else None,
        other_snapshots=sum(1 for c in commits if app_id is None or c.app_id != app_id),
        table_id=str(table.metadata.table_uuid),
        location=location,
        metadata_file=table.metadata_location,
    )
