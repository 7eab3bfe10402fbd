"""`tidemark recover --to-batch N`: roll a checkpoint (and its sink) back to an earlier committed batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tidemark.config import TidemarkConfig
from tidemark.context import PipelineContext, PipelineLocations
from tidemark.errors import CheckpointError, UsageError
from tidemark.formats import (
    Checkpoint,
    clear_sink_rollback,
    files_after,
    mark_sink_rollback,
    quarantine_entries_after,
    read_quarantine_marker,
    unloadable_stores,
    write_quarantine_marker,
)
from tidemark.recovery.archive import Move, MoveKind, perform, plan_move
from tidemark.recovery.plan import ensure_not_running
from tidemark.sinks import SinkRollback, TableRollback, Tool
from tidemark.storage import Location, open_storage


@dataclass(frozen=True)
class RollbackPlan:
    """What rolling back to a committed batch moves aside; nothing happens until it is applied."""

    checkpoint: str
    sink: str | None
    archive: str
    to_batch: int
    latest_planned: int | None
    latest_committed: int | None
    undone_batches: tuple[int, ...]
    state_version: int  # the state version the next run loads (to_batch + 1)
    moves: tuple[Move, ...]
    sink_undo: SinkRollback  # what the sink undoes: its files (in moves), or its own undo commit
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def table(self) -> TableRollback | None:
        """The sink's own undo commit (a table's), None for a sink whose files move aside."""
        return self.sink_undo.undo


def _checkpoint_moves(checkpoint: Checkpoint, paths: PipelineLocations, archive: Location, to_batch: int) -> list[Move]:
    """Every log entry and state file of the batches after to_batch; refuse when a store cannot load to_batch's."""
    version = to_batch + 1
    unloadable = unloadable_stores(checkpoint, version)
    if unloadable:
        msg = (
            f"{unloadable[0]} cannot load state version {version} (no snapshot with every delta or changelog "
            "after it): pick a later batch, or run `tidemark recover` without --to-batch (rebuilt from sink)"
        )
        raise CheckpointError(msg)
    rels = files_after(checkpoint, to_batch)
    return [plan_move(MoveKind.CHECKPOINT_FILE, paths.checkpoint, rel, archive, "checkpoint") for rel in rels]


def _quarantine_moves(paths: PipelineLocations, archive: Location, to_batch: int) -> list[Move]:
    """The quarantine files and folders of the batches after to_batch."""
    return [
        plan_move(MoveKind.QUARANTINE, paths.quarantine, name, archive, "quarantine")
        for name in quarantine_entries_after(paths.quarantine.uri, to_batch)
    ]


def plan_rollback(pipeline: PipelineContext, to_batch: int, now: datetime | None = None) -> RollbackPlan:
    """Plan moving aside every batch after to_batch; refuse when it is not committed or its state is gone."""
    if to_batch < 0:
        msg = "--to-batch must be a batch id (0 or more)"
        raise UsageError(msg)
    paths = pipeline.locations(Tool.ROLLBACK)
    checkpoint = Checkpoint.open(paths.checkpoint)
    if not checkpoint.exists():
        msg = f"checkpoint {paths.checkpoint} does not exist: run `tidemark recover` without --to-batch"
        raise CheckpointError(msg)
    ensure_not_running(paths.checkpoint)
    commits = checkpoint.commit_batches()
    offsets = checkpoint.offset_batches()
    if to_batch not in commits:
        shown = f"{commits[0]}..{commits[-1]}" if commits else "none"
        msg = f"batch {to_batch} is not committed in {paths.checkpoint} (committed batches: {shown}): pick one of those"
        raise UsageError(msg)
    if to_batch > 0 and to_batch - 1 not in offsets:
        msg = (
            f"Spark restarts after batch {to_batch} from offsets {to_batch - 1} and {to_batch}, and "
            f"offsets/{to_batch - 1} is gone from {paths.checkpoint} (pruned?): pick a later batch"
        )
        raise UsageError(msg)
    from tidemark.formats import read_sink_rollback

    interrupted = read_sink_rollback(checkpoint.store)
    if interrupted is not None and interrupted != to_batch:
        # Its table is already back at that batch: another target would leave the table and the checkpoint apart.
        msg = (
            f"a rollback to batch {interrupted} was interrupted: finish it first with --to-batch {interrupted} "
            "--apply, then roll back further if needed"
        )
        raise UsageError(msg)
    archive = paths.archive_for(now).join(f"rollback-to-{to_batch}")
    checkpoint_moves = _checkpoint_moves(checkpoint, paths, archive, to_batch)
    quarantine_moves = _quarantine_moves(paths, archive, to_batch)
    sink_undo = pipeline.sink.plan_rollback(checkpoint, to_batch)
    moves = [
        *checkpoint_moves,
        *(plan_move(MoveKind(a.kind.value), paths.sink, a.rel, archive, "sink") for a in sink_undo.aside),
        *quarantine_moves,
    ]
    undone = sorted({*(b for b in offsets if b > to_batch), *(b for b in commits if b > to_batch)})
    notes = [] if undone else [f"batch {to_batch} is already the newest batch: nothing to roll back"]
    notes.extend(sink_undo.notes)
    return RollbackPlan(
        checkpoint=paths.checkpoint.uri,
        sink=paths.sink.uri,
        archive=archive.uri,
        to_batch=to_batch,
        latest_planned=offsets[-1] if offsets else None,
        latest_committed=commits[-1] if commits else None,
        undone_batches=tuple(undone),
        state_version=to_batch + 1,
        moves=tuple(moves),
        notes=tuple(notes),
        sink_undo=sink_undo,
    )


@dataclass(frozen=True)
class RollbackResult:
    """A rollback plan and whether it was carried out."""

    plan: RollbackPlan
    applied: bool


def roll_back(config: TidemarkConfig, to_batch: int, *, apply: bool = False) -> RollbackResult:
    """Plan a rollback to a committed batch and, with apply, move everything after it aside."""
    from tidemark.pipeline.sink_check import require_matching_sink

    # Every precondition before anything moves: no live run, a sink this config wrote. An interrupted move is
    # finished first: a rollback killed mid-way leaves the sink log with a gap (its later files half moved) that
    # the sink check would read as an incomplete log (found by the chaos test, seed 1063731530).
    pipeline = PipelineContext.of(config)
    locations = pipeline.locations(Tool.ROLLBACK)
    ensure_not_running(locations.checkpoint)
    if apply:
        from tidemark.recovery.apply import finish_interrupted_moves

        finish_interrupted_moves(pipeline)
    else:
        from tidemark.storage.journal import pending_journals

        pending = pending_journals(locations.archive_base)
        if pending:
            # Planned now, the rollback would read the half-moved files as they lie; --apply finishes first.
            msg = (
                f"a move that was interrupted is not finished ({pending[0]}): 'tidemark recover --to-batch "
                f"{to_batch} --apply' finishes it first, then rolls back. Nothing was changed"
            )
            raise CheckpointError(msg)
    require_matching_sink(pipeline, "tidemark recover --to-batch", "point the config at the sink its query writes")
    plan = plan_rollback(pipeline, to_batch)
    if apply:
        ensure_not_running(locations.checkpoint)
        # First: the re-run batches must get their malformed records written again (a crash after this
        # only makes the next start re-read batches whose records are already there, which is idempotent).
        done = read_quarantine_marker(config.quarantine.path)
        if done is not None and done > to_batch:
            write_quarantine_marker(config.quarantine.path, to_batch)
        # The sink's own undo first (a table's undo commit), then the moves of the checkpoint's and the sink's
        # files. Around both, a mark a run refuses on: a kill between the undo and the moves cannot let the old
        # batches run on against the undone table; run again, the rollback finds the undo done and moves on.
        store = open_storage(locations.checkpoint.uri)
        marked = plan.sink_undo.undo is not None
        if marked:
            mark_sink_rollback(store, to_batch)
        pipeline.sink.apply_rollback(store, plan.sink_undo)
        perform(list(plan.moves), locations, "rollback", {"archive": plan.archive})
        if marked:
            clear_sink_rollback(store)
    return RollbackResult(plan, apply)
