"""`checkpoint inspect --sink` on a Delta table: its version and files (delta-rs), its log's reach, and the newest
batch of the checkpoint it holds (the checkpoint's transaction)."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.errors import CheckpointError
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
