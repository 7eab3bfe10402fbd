"""What `tidemark run` checks before it starts: a lost checkpoint next to a committed sink, and failed batches' files.

A file in the sink is taken aside as "written by a failed batch" only on evidence that Spark's sink-log
retention cannot erase: no committed batch lists it (the sink log, tidemark's own ledger, a recovery
marker) AND it was written after the newest commit (file time against the commit file's time). A file
an expired log entry no longer names is older than that commit and stays where it is.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.errors import CheckpointError
from tidemark.formats import (
    Checkpoint,
    CheckpointStatus,
    entry_rel,
    ledger_files,
    lock_is_live,
    read_lock,
    read_recovery_marker,
    read_sink_log,
    sink_data_files,
    with_checksums,
)
from tidemark.recovery.archive import Move, MoveKind, PipelineLocations, perform, pipeline_locations, plan_move
from tidemark.recovery.marker import finish_pending
from tidemark.recovery.plan import checkpoint_state
from tidemark.sinks import Tool, sink_of
from tidemark.storage import Storage, open_storage

if TYPE_CHECKING:
    from tidemark.pipeline.start import Launch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepCandidate:
    """A sink data file no committed batch lists, and whether it was written after the newest commit."""

    rel: str
    mtime: float | None
    after_last_commit: bool


def prepare_failover(launch: Launch) -> datetime | None:
    """The replay point a run must keep, recovering first when the checkpoint is gone; None: a plain run.

    A checkpoint with a recovery marker keeps its resume point forever (and gets its sink log
    repaired if a crash left that pending). A checkpoint without offsets next to a sink that has a
    metadata log is the trap: a new query would skip its first batches as "already committed".
    """
    config = launch.config
    if not sink_of(config).vouches(Tool.FAILOVER):  # a sink recovery cannot vouch for: a plain run
        return None
    paths = pipeline_locations(config)
    marker = read_recovery_marker(paths.checkpoint)
    if marker is not None:
        if not marker.injected and finish_pending(paths.checkpoint, paths.sink) is not None:
            log.warning("added the files that survived the recovery to the sink log of %s", paths.sink)
        sweep_failed_batch_files(config)
        return marker.resume_from
    if checkpoint_state(paths.checkpoint) is CheckpointStatus.PRESENT:
        sweep_failed_batch_files(config)
        return None
    sink = sink_of(config)
    if not sink.holds_output():
        return None
    if config.checkpoint.on_missing == "fail":
        msg = (
            f"the checkpoint {paths.checkpoint} is missing or empty but the sink {paths.sink} already holds this "
            f"pipeline's output: a new query would {sink.lost_checkpoint_risk}. Run "
            '`tidemark recover CONFIG` to see the plan (then --apply), or set [checkpoint] on_missing = "recover"'
        )
        raise CheckpointError(msg)
    return _recover(launch)


def _floor(value: float) -> float:
    # Object stores keep whole seconds: compare at that resolution so a later file never looks older.
    return float(math.floor(value))


def committed_files(paths: PipelineLocations, sink: Storage, checkpoint: Checkpoint) -> set[str]:
    """Every sink file some committed batch is known to have written: sink log, ledger, recovery marker."""
    known = set(checkpoint.sink_log(sink).files) | set(ledger_files(checkpoint.store))
    marker = read_recovery_marker(paths.checkpoint)
    for line in marker.entries if marker else ():
        rel = entry_rel(paths.sink, str(json.loads(line)["path"]))
        if rel is not None:
            known.add(rel)
    return known


def sweep_candidates(config: TidemarkConfig) -> list[SweepCandidate]:
    """Sink data files no committed batch lists, each with whether it is newer than the newest commit."""
    paths = pipeline_locations(config)
    sink = open_storage(paths.sink)
    checkpoint = Checkpoint.open(paths.checkpoint)
    commits = checkpoint.commit_batches()
    last_mtime = checkpoint.commit_mtime(commits[-1]) if commits else None
    known = committed_files(paths, sink, checkpoint)
    found = []
    for file in sink_data_files(sink):
        if file.rel in known:
            continue
        # No commit at all: nothing was ever committed, so any output is a failed batch's.
        after = last_mtime is None or (file.mtime is not None and _floor(file.mtime) >= _floor(last_mtime))
        found.append(SweepCandidate(file.rel, file.mtime, after))
    return found


def sweep_failed_batch_files(config: TidemarkConfig, now: datetime | None = None) -> list[Move]:
    """Move aside the files of a killed batch (written after the newest commit, listed nowhere) before a re-run.

    Spark readers skip them through the log, but plain Parquet readers would count those windows twice once
    the batch is re-run. Skipped while a live run holds the checkpoint, and when the sink has no log.
    """
    paths = pipeline_locations(config)
    info = read_lock(paths.checkpoint.uri)
    if info is not None and lock_is_live(info):
        return []
    sink = open_storage(paths.sink)
    if not read_sink_log(sink).exists:
        return []
    candidates = sweep_candidates(config)
    kept = [c.rel for c in candidates if not c.after_last_commit]
    if kept:
        log.info("%d sink file(s) no log lists are older than the newest commit (expired entries): kept", len(kept))
    failed = [c.rel for c in candidates if c.after_last_commit]
    if not failed:
        return []
    present = {e.rel for e in sink.list_files()}
    archive = paths.archive_for(now)
    moves = [
        plan_move(MoveKind.FAILED_BATCH_FILE, paths.sink, rel, archive, "failed-batches")
        for file in failed
        for rel in with_checksums(file, present)
    ]
    log.warning("moving %d file(s) of failed batches out of %s into %s", len(moves), paths.sink, archive.uri)
    perform(moves, paths, "sweep", {"archive": archive.uri})
    return moves


def _recover(launch: Launch) -> datetime:
    from tidemark.recovery.apply import apply_recovery, plan_from_source

    config = launch.config
    plan = plan_from_source(launch.session(), config)
    log.warning(
        "checkpoint %s is gone: recovering from %s (archive %s)", plan.checkpoint, plan.resume_from, plan.archive
    )
    apply_recovery(plan, launch)
    return plan.resume_from
