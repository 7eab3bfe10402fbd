"""`tidemark recover --to-batch N`: roll a checkpoint (and its sink) back to an earlier committed batch."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from tidemark.checkpoint.handle import Checkpoint
from tidemark.checkpoint.layout import (
    COMMITS,
    OFFSETS,
    SINK_LOG_DIR,
    SOURCES,
    STATE,
    classify,
    sink_log_batch,
    store_ids,
)
from tidemark.checkpoint.ledger import ledger_files
from tidemark.checkpoint.sink import companions, data_files, log_names, read_log
from tidemark.config import TidemarkConfig
from tidemark.errors import CheckpointError, UsageError
from tidemark.pipeline.quarantine import read_marker as read_quarantine_marker
from tidemark.pipeline.quarantine import write_marker as write_quarantine_marker
from tidemark.recovery.archive import Move, MoveKind, PipelineLocations, perform, pipeline_locations, plan_move
from tidemark.recovery.plan import ensure_not_running
from tidemark.storage import Location, open_storage
from tidemark.storage.base import DirListing, join

_QUARANTINE_PREFIX = "batch-"


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
    notes: tuple[str, ...] = field(default_factory=tuple)


def _checkpoint_moves(moves: list[Move], paths: PipelineLocations, archive: Location, rels: list[str]) -> None:
    moves.extend(plan_move(MoveKind.CHECKPOINT_FILE, paths.checkpoint, rel, archive, "checkpoint") for rel in rels)


def _move_with_companions(
    moves: list[Move], paths: PipelineLocations, archive: Location, listing: DirListing, names: list[str]
) -> None:
    present = {name for name, _ in listing.files}
    rels = [join(listing.rel, c) for name in sorted(names) for c in companions(name, present)]
    _checkpoint_moves(moves, paths, archive, rels)


def _state_moves(checkpoint: Checkpoint, paths: PipelineLocations, archive: Location, version: int) -> list[Move]:
    """Every state file of a version after `version`; refuse when a store cannot load `version` itself."""
    moves: list[Move] = []
    stores = checkpoint.stores()
    for listing in checkpoint.store.walk(STATE):
        ids = store_ids(listing.rel)
        if ids is not None:
            store = stores.get(ids)
            if store is not None and not store.can_load(version):
                msg = (
                    f"{listing.rel} cannot load state version {version} (no snapshot with every delta or changelog "
                    "after it): pick a later batch, or run `tidemark recover` without --to-batch (rebuilt from sink)"
                )
                raise CheckpointError(msg)
            present = {name for name, _ in listing.files}
            later = sorted(n for n, _ in listing.files if (number := classify(n)[1]) is not None and number > version)
            _checkpoint_moves(
                moves, paths, archive, [join(listing.rel, c) for f in later for c in companions(f, present)]
            )
        elif listing.rel.endswith("/_metadata/v2"):
            present = {name for name, _ in listing.files}
            later = sorted(n for n, _ in listing.files if n.isdigit() and int(n) > version - 1)
            _checkpoint_moves(
                moves, paths, archive, [join(listing.rel, c) for f in later for c in companions(f, present)]
            )
    return moves


def _log_moves(checkpoint: Checkpoint, paths: PipelineLocations, archive: Location, to_batch: int) -> list[Move]:
    moves: list[Move] = []
    store = checkpoint.store
    sources = store.list_dir(SOURCES)
    folders = [OFFSETS, COMMITS, *(f"{SOURCES}/{d}" for d in sorted(sources.dirs if sources else []))]
    for folder in folders:
        listing = store.list_dir(folder)
        if listing is None:
            continue
        present = {name for name, _ in listing.files}
        later = [n for n in present if (parsed := sink_log_batch(n)) is not None and parsed[0] > to_batch]
        _move_with_companions(moves, paths, archive, listing, later)
    return moves


def _sink_moves(checkpoint: Checkpoint, paths: PipelineLocations, archive: Location, to_batch: int) -> list[Move]:
    """The sink log files after to_batch and the data files of the batches after it.

    A file belongs to a later batch when the ledger or the newest sink log says so; a file listed nowhere
    moves only when it is newer than the commit of to_batch (an expired log entry names an older one).
    """
    sink = open_storage(paths.sink)
    names = log_names(sink)
    if not names:
        return []
    present = {e.rel for e in sink.list_files()}
    moves: list[Move] = []
    for batch, name in sorted(names.items()):
        if batch > to_batch:
            rels = companions(f"{SINK_LOG_DIR}/{name}", present)
            moves.extend(plan_move(MoveKind.CHECKPOINT_FILE, paths.sink, rel, archive, "sink") for rel in rels)
    kept = set(read_log(sink, up_to=to_batch).files)
    by_ledger = ledger_files(checkpoint.store)
    newest = set(read_log(sink).files)
    commit = checkpoint.store.stat(f"{COMMITS}/{to_batch}")
    cutoff = math.floor(commit.mtime) if commit is not None and commit.mtime is not None else None
    for file in data_files(sink):
        if file.rel in kept:
            continue
        writer = by_ledger.get(file.rel)
        if writer is not None:
            later = writer > to_batch
        elif file.rel in newest:
            later = True
        else:
            later = cutoff is None or (file.mtime is not None and math.floor(file.mtime) >= cutoff)
        if later:
            rels = companions(file.rel, present)
            moves.extend(plan_move(MoveKind.ROLLED_BACK_FILE, paths.sink, rel, archive, "sink") for rel in rels)
    return moves


def _quarantine_moves(paths: PipelineLocations, archive: Location, to_batch: int) -> list[Move]:
    """The quarantine files (`batch-<id>.jsonl`) and folders (`batch-<id>/`, executor-written) after to_batch."""
    listing = open_storage(paths.quarantine).list_dir("")
    if listing is None:
        return []
    moves = []
    for name in sorted([n for n, _ in listing.files] + list(listing.dirs)):
        stem = name.removeprefix(_QUARANTINE_PREFIX).split(".")[0]
        if name.startswith(_QUARANTINE_PREFIX) and stem.isdigit() and int(stem) > to_batch:
            moves.append(plan_move(MoveKind.QUARANTINE, paths.quarantine, name, archive, "quarantine"))
    return moves


def plan_rollback(config: TidemarkConfig, to_batch: int, now: datetime | None = None) -> RollbackPlan:
    """Plan moving aside every batch after to_batch; refuse when it is not committed or its state is gone."""
    if to_batch < 0:
        msg = "--to-batch must be a batch id (0 or more)"
        raise UsageError(msg)
    paths = pipeline_locations(config)
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
    archive = paths.archive_for(now).join(f"rollback-to-{to_batch}")
    moves = [
        *_log_moves(checkpoint, paths, archive, to_batch),
        *_state_moves(checkpoint, paths, archive, to_batch + 1),
        *_sink_moves(checkpoint, paths, archive, to_batch),
        *_quarantine_moves(paths, archive, to_batch),
    ]
    undone = sorted({*(b for b in offsets if b > to_batch), *(b for b in commits if b > to_batch)})
    notes = [] if undone else [f"batch {to_batch} is already the newest batch: nothing to roll back"]
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
    )


@dataclass(frozen=True)
class RollbackResult:
    """A rollback plan and whether it was carried out."""

    plan: RollbackPlan
    applied: bool


def roll_back(config: TidemarkConfig, to_batch: int, *, apply: bool = False) -> RollbackResult:
    """Plan a rollback to a committed batch and, with apply, move everything after it aside."""
    if apply:
        from tidemark.recovery.apply import finish_interrupted_moves

        finish_interrupted_moves(config)
    plan = plan_rollback(config, to_batch)
    if apply:
        paths = pipeline_locations(config)
        ensure_not_running(paths.checkpoint)
        # First: the re-run batches must get their malformed records written again (a crash after this
        # only makes the next start re-read batches whose records are already there, which is idempotent).
        done = read_quarantine_marker(config.quarantine.path)
        if done is not None and done > to_batch:
            write_quarantine_marker(config.quarantine.path, to_batch)
        perform(list(plan.moves), paths, "rollback", {"archive": plan.archive})
    return RollbackResult(plan, apply)
