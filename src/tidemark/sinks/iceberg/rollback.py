"""`recover --to-batch` on an Iceberg table: Iceberg's own `rollback_to_snapshot` to the snapshot before the first
undone batch's, never file surgery.

The procedure makes no new snapshot: it points the table's current snapshot back at an ancestor, so the undone
batches' snapshots leave the lineage (they stay in the table's history, their files on storage, until
`expire_snapshots`) and the pipeline's newest version in the lineage is the kept batch's again: the re-run batches
append theirs anew. Rolling back drops every snapshot after the target, so the plan refuses in one line where
another writer's snapshot (another application's append, a compaction, a delete) follows the first undone batch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tidemark.errors import CheckpointError, UsageError
from tidemark.formats import SinkTransaction
from tidemark.sinks.base import TableRollback
from tidemark.sinks.iceberg.audit import table_output
from tidemark.sinks.iceberg.table import lineage, open_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.sinks.iceberg.catalog import CatalogTable

log = logging.getLogger(__name__)


def plan_table_rollback(
    path: str, transaction: SinkTransaction, to_batch: int, catalog: CatalogTable | None = None
) -> TableRollback:
    """The rollback_to_snapshot that undoes the checkpoint's batches after to_batch; refused in one line where it
    would drop another writer's snapshot or where expire_snapshots removed the batches' snapshots."""
    table = open_table(path, catalog)
    if table is None:
        msg = f"{path} is not an Iceberg table (no metadata/*.metadata.json): there is nothing to roll back"
        raise CheckpointError(msg)
    output = table_output(path, transaction, catalog)
    if not output.checks_batch(to_batch + 1):
        msg = (
            f"expire_snapshots removed the snapshots of the batches after {to_batch} from {path}: they cannot be "
            "taken out one by one; pick a later batch"
        )
        raise CheckpointError(msg)
    undone = tuple(c for c in output.commits if c.batch > to_batch)
    if not undone:
        return TableRollback(path, to_batch, (), None)
    commits = lineage(table)
    by_sequence = {c.sequence: c for c in commits}
    first = by_sequence[min(c.version for c in undone)]
    if first.parent_id is None:
        msg = f"batch {undone[0].batch}'s snapshot is the first of {path}: there is no snapshot to roll back to"
        raise UsageError(msg)
    for commit in commits:
        ours = commit.app_id == transaction.app_id and commit.version is not None
        if commit.sequence > first.sequence and not ours:
            writer = commit.app_id or commit.operation
            msg = (
                f"snapshot {commit.snapshot_id} of {path} ({writer}) follows batch {undone[0].batch}'s: Iceberg's "
                f"rollback_to_snapshot to before the undone batches would drop it; pick a later batch, or roll back "
                "by hand"
            )
            raise UsageError(msg)
    notes = (
        f"Iceberg's rollback_to_snapshot of {path} to snapshot {first.parent_id} (no new snapshot; the undone ones "
        f"stay in its history until expire_snapshots); this pipeline's newest version goes back to "
        f"{transaction.version_of(to_batch)} (batch {to_batch})",
    )
    return TableRollback(
        path,
        to_batch,
        undone,
        transaction.version_of(to_batch),
        notes,
        restore_version=first.parent_id,
        undone_by=f"taken out of its lineage by rollback_to_snapshot {first.parent_id} (no new snapshot)",
    )


def apply_table_rollback(
    spark: SparkSession, table_name: str, path: str, plan: TableRollback, catalog: CatalogTable | None = None
) -> None:
    """The procedure call (nothing when the table is at the target snapshot already: a rollback run again)."""
    if plan.reset_to is None or plan.restore_version is None:
        return
    table = open_table(path, catalog)
    current = table.current_snapshot() if table is not None else None
    if current is not None and current.snapshot_id == plan.restore_version:
        log.info("%s is at snapshot %d already", path, plan.restore_version)
        return
    spark_catalog, name = table_name.split(".", 1)
    try:
        spark.sql(f"CALL {spark_catalog}.system.rollback_to_snapshot('{name}', {plan.restore_version})").collect()
    except Exception as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        msg = f"Iceberg's rollback_to_snapshot of {path} to snapshot {plan.restore_version} failed: {first[:300]}"
        raise CheckpointError(msg) from exc
    log.info("rolled %s back to snapshot %d", path, plan.restore_version)
