"""Automatic failover for `tidemark run`: [checkpoint] on_missing = "fail" | "recover"."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.checkpoint.lock import lock_is_live, read_lock
from tidemark.config import SinkFormat, TidemarkConfig
from tidemark.errors import CheckpointError
from tidemark.recovery.archive import Move, MoveKind, perform, pipeline_paths, plan_move
from tidemark.recovery.marker import finish_pending, read_marker
from tidemark.recovery.plan import checkpoint_state
from tidemark.recovery.sink import companions, data_files, entry_path, read_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def prepare_failover(config: TidemarkConfig, spark: SparkSession | None) -> datetime | None:
    """The replay point a run must keep, recovering first when the checkpoint is gone; None: a plain run.

    A checkpoint with a recovery marker keeps its resume point forever (and gets its sink log
    repaired if a crash left that pending). A checkpoint without offsets next to a sink that has a
    metadata log is the trap: a new query would skip its first batches as "already committed".
    """
    if config.sink.format is not SinkFormat.PARQUET or not config.sink.path or "://" in config.sink.path:
        return None
    paths = pipeline_paths(config)
    marker = read_marker(paths.checkpoint) if paths.checkpoint.exists() else None
    if marker is not None:
        if not marker.injected and finish_pending(paths.checkpoint, paths.sink) is not None:
            log.warning("added the files that survived the recovery to the sink log of %s", paths.sink)
        sweep_failed_batch_files(config)
        return marker.resume_from
    if checkpoint_state(paths.checkpoint) == "present":
        sweep_failed_batch_files(config)
        return None
    if not read_log(paths.sink).exists:
        return None
    if config.checkpoint.on_missing == "fail":
        msg = (
            f"the checkpoint {paths.checkpoint} is missing or empty but the sink {paths.sink} already holds "
            "committed batches: a new query would skip them as already committed. Run "
            '`tidemark recover CONFIG` to see the plan (then --apply), or set [checkpoint] on_missing = "recover"'
        )
        raise CheckpointError(msg)
    return _recover(config, spark)


def sweep_failed_batch_files(config: TidemarkConfig, now: datetime | None = None) -> list[Move]:
    """Move aside sink files no committed batch lists (a killed batch's output) before a restart re-runs it.

    Spark readers skip them through the log, but plain Parquet readers would count those windows
    twice once the batch is re-run. Skipped while a live run holds the checkpoint.
    """
    paths = pipeline_paths(config)
    if paths.checkpoint.exists():
        info = read_lock(str(paths.checkpoint))
        if info is not None and lock_is_live(info):
            return []
    sink_log = read_log(paths.sink)
    if not sink_log.exists:
        return []
    marker = read_marker(paths.checkpoint) if paths.checkpoint.exists() else None
    listed = set(sink_log.files) | {entry_path(str(json.loads(e)["path"])) for e in (marker.entries if marker else ())}
    archive = paths.archive_for(now)
    moves = [
        plan_move(MoveKind.FAILED_BATCH_FILE, f, paths.sink, archive, "failed-batches")
        for file in data_files(paths.sink)
        if str(file) not in listed
        for f in companions(file)
    ]
    if moves:
        log.warning("moving %d file(s) of failed batches out of %s into %s", len(moves), paths.sink, archive)
        perform(moves, [paths.sink])
    return moves


def _recover(config: TidemarkConfig, spark: SparkSession | None) -> datetime:
    from tidemark.recovery.apply import apply_recovery
    from tidemark.recovery.plan import plan_recovery
    from tidemark.recovery.replay import newest_landing_event
    from tidemark.session import session_for

    session = spark or session_for(config)
    plan = plan_recovery(config, newest_landing_event(session, config))
    log.warning(
        "checkpoint %s is gone: recovering from %s (archive %s)", plan.checkpoint, plan.resume_from, plan.archive
    )
    apply_recovery(config, plan, session)
    return plan.resume_from
