"""`checkpoint inspect --sink` on a Delta table: its version and files (delta-rs), its log's reach, and the newest
batch of the checkpoint it holds (the checkpoint's transaction)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from tidemark.errors import CheckpointError
from tidemark.findings import Finding, Severity
from tidemark.sinks.base import SinkLimits
from tidemark.sizes import format_size
from tidemark.storage import Storage, open_storage


@dataclass(frozen=True)
class DeltaSinkReport:
    """A Delta table sink, as its snapshot and log show it, and the transaction this checkpoint writes it with."""

    path: str
    version: int
    files: int  # active data files
    bytes_total: int
    rows: int | None  # rows its readers read (stats less deletion vectors); None when a file's stats have none
    checkpoint_version: int | None  # the log's newest checkpoint
    oldest_commit: int | None  # the oldest commit still in the log (older ones: removed by log retention)
    transactions: dict[str, int]  # every writer's app id in the commits still in the log -> its latest version
    app_id: str | None  # the checkpoint's own (its _tidemark sink transaction), None for a checkpoint tidemark
    # did not start on this table
    last_batch: int | None  # the newest batch of this checkpoint the table holds
    table_id: str | None = None
    protocol: str = ""  # reader/writer versions and features

    @property
    def mean_file_bytes(self) -> int:
        """Average size of an active file."""
        return self.bytes_total // self.files if self.files else 0

    def findings(self, limits: SinkLimits) -> list[Finding]:
        """DELTA_SMALL_FILES when the table holds many small files (a streaming append writes one per task and
        batch); the fix is Delta's own compaction."""
        if self.files < limits.max_table_files or self.mean_file_bytes >= limits.small_file_bytes:
            return []
        message = (
            f"the Delta table {self.path} holds {self.files:,} active files averaging "
            f"{format_size(self.mean_file_bytes)}: a streaming append writes one file per task and batch, and every "
            "read opens them all"
        )
        fix = (
            f'compact it with Delta\'s OPTIMIZE: spark.sql("OPTIMIZE delta.`{self.path}`") or '
            f'DeltaTable.forPath(spark, "{self.path}").optimize().executeCompaction() (the pipeline may keep running: '
            "its appends do not conflict with a compaction); fewer [sink] writers or a longer trigger interval write "
            "fewer files"
        )
        return [Finding("DELTA_SMALL_FILES", Severity.WARNING, message, fix)]

    def describe(self) -> list[tuple[str, str]]:
        """The table's version, files and log reach; the transaction this checkpoint writes with; other writers."""
        rows = f", {self.rows:,} rows" if self.rows is not None else ""
        lines = [
            (
                "Delta sink",
                f"{self.path}: version {self.version}, {self.files:,} active files ({format_size(self.bytes_total)}"
                f"{rows}), log checkpoint {_opt(self.checkpoint_version)}, oldest commit {_opt(self.oldest_commit)}",
            )
        ]
        if self.app_id is None:
            lines.append(("", "  this checkpoint keeps no Delta transaction (not started by tidemark on this table)"))
        else:
            version = self.transactions.get(self.app_id)
            lines.append(
                (
                    "",
                    f"  this checkpoint writes as {self.app_id}: latest version {_opt(version)} "
                    f"(batch {_opt(self.last_batch)})",
                )
            )
        others = {a: v for a, v in self.transactions.items() if a != self.app_id}
        if others:
            shown = ", ".join(f"{a} {v}" for a, v in sorted(others.items())[:5])
            lines.append(("", f"  other writers' transactions: {shown}{' ...' if len(others) > 5 else ''}"))
        return lines

    def missing_log_entries(self, repartitioned: Collection[int]) -> dict[int, str]:
        """None: a table owes a batch that wrote nothing no commit."""
        del repartitioned
        return {}


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def inspect_table(path: str, checkpoint: Storage) -> DeltaSinkReport:
    """What the Delta table at path holds, and the newest batch of this checkpoint in it."""
    from tidemark.formats import read_sink_transaction
    from tidemark.sinks.delta.log import read_commits
    from tidemark.sinks.delta.table import read_table_snapshot

    snapshot = read_table_snapshot(path)
    if snapshot is None:
        msg = f"{path} is not a Delta table (no _delta_log commit)"
        raise CheckpointError(msg)
    log = read_commits(open_storage(path))
    transactions: dict[str, int] = {}
    for commit in log.commits:
        if commit.app_id is not None and commit.txn_version is not None:
            transactions[commit.app_id] = commit.txn_version
    transaction = read_sink_transaction(checkpoint)
    app_id = transaction.app_id if transaction is not None else None
    version = snapshot.table.transaction_version(app_id) if app_id is not None else None
    if app_id is not None and version is not None:
        transactions[app_id] = int(version)
    protocol = snapshot.protocol
    features = sorted({*protocol.reader_features, *protocol.writer_features})
    return DeltaSinkReport(
        path=path,
        version=snapshot.version,
        files=len(snapshot.files),
        bytes_total=sum(f.size for f in snapshot.files),
        rows=snapshot.rows,
        checkpoint_version=log.checkpoint_version,
        oldest_commit=log.oldest_commit,
        transactions=transactions,
        app_id=app_id,
        last_batch=transaction.batch_of(int(version)) if transaction is not None and version is not None else None,
        table_id=snapshot.table_id,
        protocol=f"reader {protocol.min_reader}, writer {protocol.min_writer}"
        + (f" ({', '.join(features)})" if features else ""),
    )
