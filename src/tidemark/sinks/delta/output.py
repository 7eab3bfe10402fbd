"""What a Delta table holds of a checkpoint's batches (`audit`, the rollback plan): the commits carrying the
checkpoint's transaction, by batch, told apart from other writers' commits; the live files from delta-rs."""

from __future__ import annotations

from tidemark.formats import SinkTransaction
from tidemark.sinks.base import TableCommit, TableOutput
from tidemark.sinks.delta.log import ROLLBACK_OPERATIONS, CommitLog, read_commits
from tidemark.sinks.delta.table import TableSnapshot, read_table_snapshot
from tidemark.storage import open_storage


def table_output(path: str, transaction: SinkTransaction | None) -> TableOutput:
    """The checkpoint's batches as the table's log holds them (an absent table holds none)."""
    snapshot = read_table_snapshot(path)
    log = read_commits(open_storage(path)) if snapshot is not None else CommitLog(path, ())
    return output_of(path, snapshot, log, transaction)


def output_of(
    path: str, snapshot: TableSnapshot | None, log: CommitLog, transaction: SinkTransaction | None
) -> TableOutput:
    """table_output from a snapshot and the commits already read."""
    notes: list[str] = []
    if transaction is None:
        notes.append(
            "the checkpoint keeps no Delta transaction (tidemark did not start it on this table): its batches "
            "cannot be told apart from other writers' commits"
        )
    mine: list[TableCommit] = []
    others: list[str] = []
    earlier = undone = 0
    app_id = transaction.app_id if transaction is not None else None
    for commit in log.commits:
        ours = transaction is not None and commit.app_id == app_id and commit.txn_version is not None
        if ours and commit.operation in ROLLBACK_OPERATIONS:
            # `recover --to-batch`: the batches after the one it kept are undone; the re-run batches write their
            # versions again.
            assert transaction is not None and commit.txn_version is not None
            kept_batch = transaction.batch_of(commit.txn_version)
            undone += sum(1 for c in mine if c.batch > kept_batch)
            mine = [c for c in mine if c.batch <= kept_batch]
            continue
        if ours:
            assert transaction is not None and commit.txn_version is not None
            batch = transaction.batch_of(commit.txn_version)
            if batch < 0:  # this pipeline's, from a checkpoint before this one (a recovery started a new one)
                earlier += 1
                continue
            mine.append(TableCommit(batch, commit.version, tuple(f.path for f in commit.added), commit.rows_added))
        elif commit.added or commit.removed:
            others.append(commit.app_id or commit.operation or "unknown")
    if earlier:
        notes.append(f"{earlier} commit(s) by this pipeline's earlier checkpoints (before a recovery)")
    if undone:
        notes.append(f"{undone} commit(s) undone by `tidemark recover --to-batch` (their files removed)")
    oldest = log.oldest_commit
    first = None
    if oldest is not None and oldest > 0:
        first = mine[0].batch if mine else None
        notes.append(
            f"Delta's log retention removed commits 0 to {oldest - 1}: batches written before then cannot be checked "
            "one by one (their rows are still in the table)"
        )
    return TableOutput(
        uri=path,
        commits=tuple(mine),
        live_files=tuple(sorted(f.path for f in snapshot.files)) if snapshot is not None else (),
        other_commits=len(others),
        other_writers=tuple(sorted(set(others))),
        first_batch_held=first,
        notes=tuple(notes),
        log_trimmed=bool(oldest),
    )
