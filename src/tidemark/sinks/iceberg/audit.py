"""An Iceberg sink's audit: each committed batch's snapshot, read from the table's current lineage.

A batch is in the table when a snapshot of the lineage carries the checkpoint's transaction (tidemark's app id and
the batch's version in its summary). Other writers' snapshots (a compaction's `replace`, another application's
appends, a delete) carry no such keys, or another app id: they are counted apart, never as this pipeline's batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidemark.formats import Checkpoint, SinkTransaction
from tidemark.sinks.audit import SinkAudit
from tidemark.sinks.base import TableCommit, TableOutput
from tidemark.sinks.iceberg.table import DATA, added_files, below, lineage, live_files, open_table, require_readable
from tidemark.sinks.table_audit import audit_commits

if TYPE_CHECKING:
    from tidemark.sinks.iceberg.catalog import CatalogTable


def table_output(path: str, transaction: SinkTransaction | None, catalog: CatalogTable | None = None) -> TableOutput:
    """The checkpoint's batches as the table's lineage holds them (an absent table holds none)."""
    table = open_table(path, catalog)
    notes: list[str] = []
    if transaction is None:
        notes.append(
            "the checkpoint keeps no Iceberg transaction (tidemark did not start it on this table): its batches "
            "cannot be told apart from other writers' snapshots"
        )
    if table is None:
        return TableOutput(path, (), (), 0, (), None, tuple(notes))
    files = live_files(table)
    require_readable(path, files, "audit it")
    live = tuple(
        sorted(
            below(path, p)
            for p, c in zip(files.column("file_path").to_pylist(), files.column("content").to_pylist(), strict=True)
            if c == DATA
        )
    )
    mine: list[TableCommit] = []
    others: list[str] = []
    earlier = 0
    commits = lineage(table)
    for commit in commits:
        ours = transaction is not None and commit.app_id == transaction.app_id and commit.version is not None
        if ours:
            assert transaction is not None and commit.version is not None
            batch = transaction.batch_of(commit.version)
            if batch < 0:  # this pipeline's, from a checkpoint before this one (a recovery started a new one)
                earlier += 1
                continue
            made = added_files(table, commit.snapshot_id, path)
            mine.append(TableCommit(batch, commit.sequence, made, commit.added_rows))
        else:
            others.append(commit.app_id or commit.operation)
    if earlier:
        notes.append(f"{earlier} snapshot(s) by this pipeline's earlier checkpoints (before a recovery)")
    # expire_snapshots drops the oldest snapshots: the lineage then starts at a parent it no longer has.
    trimmed = bool(commits) and commits[0].parent_id is not None
    if trimmed:
        notes.append(
            "expire_snapshots removed the table's oldest snapshots: batches written before them cannot be checked "
            "one by one (their rows are still in the table)"
        )
    return TableOutput(
        uri=path,
        commits=tuple(mine),
        live_files=live,
        other_commits=len(others),
        other_writers=tuple(sorted(set(others))),
        first_batch_held=mine[0].batch if trimmed and mine else None,
        notes=tuple(notes),
        log_trimmed=trimmed,
    )


def audit_table(checkpoint: Checkpoint, table: TableOutput, inputs: Mapping[int, tuple[str, ...]]) -> SinkAudit:
    """Each committed batch's snapshot once (sinks/table_audit.py): two snapshots for one batch and a committed batch
    with none (where the lineage still reaches back to it) are violations."""
    return audit_commits(checkpoint, table, inputs, unit="snapshot")
