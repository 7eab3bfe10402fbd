"""`recover --to-batch` on a Delta table: Delta's own RESTORE to the version before the first undone batch's commit,
in one commit that also sets the pipeline's transaction back to the kept batch's version.

A plain RESTORE leaves every app's transaction at its newest version (measured on delta-rs 1.6: versions 0-2
written, RESTORE to 0, the transaction still says 2), so the re-run batches would be skipped as written; the
RESTORE commit here carries the pipeline's `txn` at the kept batch's version (Delta's newest `txn` per app wins on
replay). RESTORE brings back the table exactly as it was at that version: another writer's data change after it
(an append under another app id, a DELETE, an UPDATE, a MERGE) would be dropped, so the plan refuses in one line;
a rearrangement that changed no data (OPTIMIZE) is undone with its files, rows unchanged.
"""

from __future__ import annotations

import logging

from tidemark.errors import CheckpointError, UsageError
from tidemark.formats import SinkTransaction
from tidemark.sinks.base import TableRollback
from tidemark.sinks.delta.log import read_commits
from tidemark.sinks.delta.output import output_of
from tidemark.sinks.delta.protocol import require_supported
from tidemark.sinks.delta.table import open_table, protocol_of, read_table_snapshot
from tidemark.storage import open_storage

log = logging.getLogger(__name__)


def plan_table_rollback(path: str, transaction: SinkTransaction, to_batch: int) -> TableRollback:
    """The RESTORE that undoes the checkpoint's batches after to_batch; refused in one line where it would drop
    another writer's work, where the log no longer reaches the batches, or where the protocol forbids it."""
    snapshot = read_table_snapshot(path)
    if snapshot is None:
        msg = f"{path} is not a Delta table (no _delta_log commit): there is nothing to roll back"
        raise CheckpointError(msg)
    require_supported(path, snapshot.protocol, "roll it back")
    # The `appendOnly` writer feature only says the table may carry the property (every table with deletion vectors
    # lists it); the property itself forbids removing rows.
    if snapshot.configuration.get("delta.appendOnly") == "true":
        msg = f"the Delta table {path} is append-only (delta.appendOnly): its batches cannot be taken out of it"
        raise UsageError(msg)
    log_ = read_commits(open_storage(path))
    output = output_of(path, snapshot, log_, transaction)
    if not output.checks_batch(to_batch + 1):
        msg = (
            f"Delta's log retention removed the commits of the batches after {to_batch} from {path}: they cannot be "
            "taken out one by one; pick a later batch"
        )
        raise CheckpointError(msg)
    undone = tuple(c for c in output.commits if c.batch > to_batch)
    now = snapshot.table.transaction_version(transaction.app_id)
    target = transaction.version_of(to_batch)
    if not undone:
        if now is not None and now > target:
            msg = (
                f"the Delta table {path} holds transaction {transaction.app_id} version {now}, after batch "
                f"{to_batch}'s {target}, but no commit of a later batch is in its log: roll back by hand (RESTORE) or "
                "pick a later batch"
            )
            raise CheckpointError(msg)
        return TableRollback(path, to_batch, (), None)
    restore_to = min(c.version for c in undone) - 1
    mine = {c.version for c in output.commits}
    for commit in log_.commits:
        if commit.version <= restore_to or commit.version in mine or not commit.changes_data:
            continue
        if commit.app_id == transaction.app_id:
            continue  # this pipeline's own earlier rollback
        writer = commit.app_id or commit.operation or "another writer"
        msg = (
            f"commit {commit.version} of {path} ({writer}) changed the table's data after batch {to_batch}: a RESTORE "
            "to before the undone batches would drop it; pick a later batch, or roll back by hand"
        )
        raise CheckpointError(msg)
    notes = (
        f"RESTORE of {path} to version {restore_to}; the table's transaction {transaction.app_id} goes back to "
        f"version {target} (batch {to_batch})",
    )
    return TableRollback(path, to_batch, undone, target, notes, restore_version=restore_to)


def apply_table_rollback(path: str, transaction: SinkTransaction, plan: TableRollback) -> None:
    """The RESTORE commit (nothing when the plan found the table rolled back already)."""
    from deltalake import CommitProperties, Transaction

    if plan.reset_to is None or plan.restore_version is None:
        return
    table = open_table(path)
    assert table is not None
    require_supported(path, protocol_of(table), "roll it back")
    properties = CommitProperties(
        app_transactions=[Transaction(transaction.app_id, plan.reset_to)],
        custom_metadata={"userMetadata": f"tidemark recover --to-batch {plan.to_batch}"},
    )
    try:
        table.restore(plan.restore_version, commit_properties=properties)
    except Exception as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        msg = f"Delta's RESTORE of {path} to version {plan.restore_version} failed: {first[:300]}"
        raise CheckpointError(msg) from exc
    log.info("restored %s to version %d, %s at %d", path, plan.restore_version, transaction.app_id, plan.reset_to)
