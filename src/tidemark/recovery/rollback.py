"""`tidemark recover --to-batch N`: roll a checkpoint (and its sink) back to an earlier committed batch."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tidemark.checkpoint.layout import REPLAY_KINDS, SNAPSHOT_KINDS, FileKind, batch_ids, classify, sink_log_batch
from tidemark.config import TidemarkConfig
from tidemark.errors import CheckpointError, UsageError
from tidemark.recovery.archive import Move, MoveKind, PipelinePaths, perform, pipeline_paths, plan_move
from tidemark.recovery.plan import ensure_not_running
from tidemark.recovery.sink import SINK_LOG, companions, data_files, log_names, read_log

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


def loadable(versions: dict[int, set[FileKind]], version: int) -> bool:
    """True when a store can load `version`: a snapshot at or below it and every delta/changelog above that."""
    current = version
    while current > 0:
        kinds = versions.get(current, set())
        if kinds & SNAPSHOT_KINDS:
            return True
        if not kinds & REPLAY_KINDS:
            return False
        current -= 1
    return True  # version 0 is the empty store


def _store_dirs(state: Path) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(state):
        dirs[:] = [d for d in dirs if d not in ("SSTs", "logs", "_metadata", "_stateSchema")]
        if any(classify(f)[1] is not None for f in files):
            found.append(Path(root))
    return sorted(found)


def _state_moves(paths: PipelinePaths, archive: Path, version: int) -> list[Move]:
    moves: list[Move] = []
    state = paths.checkpoint / "state"
    for store in _store_dirs(state):
        versions: dict[int, set[FileKind]] = {}
        later: list[Path] = []
        for child in store.iterdir():
            kind, number, _ = classify(child.name)
            if number is None:
                continue
            versions.setdefault(number, set()).add(kind)
            if number > version:
                later.append(child)
        if not loadable(versions, version):
            rel = store.relative_to(paths.checkpoint)
            msg = (
                f"{rel} cannot load state version {version} (no snapshot with every delta/changelog after it): "
                "pick a later batch, or run `tidemark recover` without --to-batch to rebuild from the sink"
            )
            raise CheckpointError(msg)
        for file in sorted(later):
            moves.extend(
                plan_move(MoveKind.CHECKPOINT_FILE, f, paths.checkpoint, archive, "checkpoint")
                for f in companions(file)
            )
    for v2 in sorted(state.glob("*/_metadata/v2/*")):
        if v2.name.isdigit() and int(v2.name) > version - 1:
            moves.extend(
                plan_move(MoveKind.CHECKPOINT_FILE, f, paths.checkpoint, archive, "checkpoint") for f in companions(v2)
            )
    return moves


def _log_moves(paths: PipelinePaths, archive: Path, to_batch: int) -> list[Move]:
    moves: list[Move] = []
    folders = [paths.checkpoint / "offsets", paths.checkpoint / "commits"]
    sources = paths.checkpoint / "sources"
    if sources.is_dir():
        folders.extend(sorted(p for p in sources.iterdir() if p.is_dir()))
    for folder in folders:
        for child in sorted(folder.iterdir()) if folder.is_dir() else []:
            parsed = sink_log_batch(child.name)
            if parsed is not None and parsed[0] > to_batch:
                moves.extend(
                    plan_move(MoveKind.CHECKPOINT_FILE, f, paths.checkpoint, archive, "checkpoint")
                    for f in companions(child)
                )
    return moves


def _sink_moves(paths: PipelinePaths, archive: Path, to_batch: int) -> list[Move]:
    names = log_names(paths.sink)
    if not names:
        return []
    moves: list[Move] = []
    for batch, name in sorted(names.items()):
        if batch > to_batch:
            file = paths.sink / SINK_LOG / name
            moves.extend(plan_move(MoveKind.CHECKPOINT_FILE, f, paths.sink, archive, "sink") for f in companions(file))
    kept = set(read_log(paths.sink, up_to=to_batch).files)
    for file in data_files(paths.sink):
        if str(file) not in kept:
            moves.extend(plan_move(MoveKind.ROLLED_BACK_FILE, f, paths.sink, archive, "sink") for f in companions(file))
    return moves


def _quarantine_moves(paths: PipelinePaths, archive: Path, to_batch: int) -> list[Move]:
    if not paths.quarantine.is_dir():
        return []
    moves = []
    for file in sorted(paths.quarantine.iterdir()):
        stem = file.name.removeprefix(_QUARANTINE_PREFIX).split(".")[0]
        if file.name.startswith(_QUARANTINE_PREFIX) and stem.isdigit() and int(stem) > to_batch:
            moves.append(plan_move(MoveKind.QUARANTINE, file, paths.quarantine, archive, "quarantine"))
    return moves


def plan_rollback(config: TidemarkConfig, to_batch: int, now: datetime | None = None) -> RollbackPlan:
    """Plan moving aside every batch after to_batch; refuse when it is not committed or its state is gone."""
    if to_batch < 0:
        msg = "--to-batch must be a batch id (0 or more)"
        raise UsageError(msg)
    paths = pipeline_paths(config)
    if not paths.checkpoint.exists():
        msg = f"checkpoint {paths.checkpoint} does not exist: run `tidemark recover` without --to-batch"
        raise CheckpointError(msg)
    ensure_not_running(paths.checkpoint)
    commits = batch_ids(paths.checkpoint / "commits")
    offsets = batch_ids(paths.checkpoint / "offsets")
    if to_batch not in commits:
        shown = f"{commits[0]}..{commits[-1]}" if commits else "none"
        msg = f"batch {to_batch} is not committed in {paths.checkpoint} (committed batches: {shown}): pick one of those"
        raise UsageError(msg)
    archive = paths.archive_for(now) / f"rollback-to-{to_batch}"
    moves = [
        *_log_moves(paths, archive, to_batch),
        *_state_moves(paths, archive, to_batch + 1),
        *_sink_moves(paths, archive, to_batch),
        *_quarantine_moves(paths, archive, to_batch),
    ]
    undone = sorted({*(b for b in offsets if b > to_batch), *(b for b in commits if b > to_batch)})
    notes = [] if undone else [f"batch {to_batch} is already the newest batch: nothing to roll back"]
    return RollbackPlan(
        checkpoint=str(paths.checkpoint),
        sink=str(paths.sink),
        archive=str(archive),
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
    plan = plan_rollback(config, to_batch)
    if apply:
        paths = pipeline_paths(config)
        ensure_not_running(paths.checkpoint)
        perform(list(plan.moves), [paths.checkpoint, paths.sink, paths.quarantine])
    return RollbackResult(plan, apply)
