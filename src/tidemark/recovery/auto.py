"""What `tidemark run` checks before it starts: a lost checkpoint next to a committed sink, and failed batches' files.

A file in the sink is taken aside as "written by a failed batch" only on evidence that Spark's sink-log
retention cannot erase (the sink's package says which: `Sink.failed_batch_files`): no committed batch lists
it AND it was written after the newest commit. A file an expired log entry no longer names is older than
that commit and stays where it is.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.context import PipelineContext
from tidemark.errors import CheckpointError
from tidemark.formats import Checkpoint, CheckpointStatus, lock_is_live, read_lock, read_recovery_marker
from tidemark.recovery.archive import Move, MoveKind, perform, plan_move
from tidemark.recovery.plan import checkpoint_state
from tidemark.sinks import Tool

if TYPE_CHECKING:
    from tidemark.pipeline.start import Launch

log = logging.getLogger(__name__)


def prepare_failover(launch: Launch) -> datetime | None:
    """The replay point a run must keep, recovering first when the checkpoint is gone; None: a plain run.

    A checkpoint with a recovery marker keeps its resume point forever (and gets its sink log
    repaired if a crash left that pending). A checkpoint without offsets next to a sink that has a
    metadata log is the trap: a new query would skip its first batches as "already committed".
    """
    pipeline = launch.pipeline
    config, sink = pipeline.config, pipeline.sink
    if not sink.vouches(Tool.FAILOVER):  # a sink recovery cannot vouch for: a plain run
        return None
    paths = pipeline.locations()
    marker = read_recovery_marker(paths.checkpoint)
    if marker is not None:
        if not marker.injected and sink.finish_recovery(paths.checkpoint) is not None:
            log.warning("added the files that survived the recovery to the sink log of %s", paths.sink)
        sweep_failed_batch_files(pipeline)
        return marker.resume_from
    if checkpoint_state(paths.checkpoint) is CheckpointStatus.PRESENT:
        sweep_failed_batch_files(pipeline)
        return None
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


def sweep_failed_batch_files(pipeline: PipelineContext, now: datetime | None = None) -> list[Move]:
    """Move aside the files of a killed batch (written after the newest commit, listed nowhere) before a re-run.

    Spark readers skip them through the log, but plain Parquet readers would count those windows twice once
    the batch is re-run. Skipped while a live run holds the checkpoint; the sink says which files they are.
    """
    paths = pipeline.locations()
    info = read_lock(paths.checkpoint.uri)
    if info is not None and lock_is_live(info):
        return []
    failed, kept = pipeline.sink.failed_batch_files(Checkpoint.open(paths.checkpoint))
    if kept:
        log.info("%d sink file(s) no log lists are older than the newest commit (expired entries): kept", kept)
    if not failed:
        return []
    archive = paths.archive_for(now)
    moves = [plan_move(MoveKind.FAILED_BATCH_FILE, paths.sink, rel, archive, "failed-batches") for rel in failed]
    log.warning("moving %d file(s) of failed batches out of %s into %s", len(moves), paths.sink, archive.uri)
    perform(moves, paths, "sweep", {"archive": archive.uri})
    return moves


def _recover(launch: Launch) -> datetime:
    from tidemark.recovery.apply import apply_recovery, plan_from_source

    plan = plan_from_source(launch.session(), launch.pipeline)
    log.warning(
        "checkpoint %s is gone: recovering from %s (archive %s)", plan.checkpoint, plan.resume_from, plan.archive
    )
    apply_recovery(plan, launch)
    return plan.resume_from
