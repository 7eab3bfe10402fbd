"""`tidemark run` with failover around it: finish interrupted moves, recover a lost checkpoint, then run.

Failover wraps the run rather than being called from inside it, so the pipeline package does not
depend on recovery (which itself runs the pipeline to replay).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from tidemark.config import TidemarkConfig
from tidemark.formats import CheckpointStatus, read_recovery_marker
from tidemark.pipeline.run import RunResult, run_pipeline
from tidemark.recovery.apply import finish_interrupted_moves
from tidemark.recovery.archive import pipeline_locations
from tidemark.recovery.auto import prepare_failover
from tidemark.recovery.marker import finish_pending
from tidemark.recovery.plan import checkpoint_state
from tidemark.recovery.replay import replay_config
from tidemark.sinks import Tool, sink_of
from tidemark.storage import parse_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def run_with_failover(
    config: TidemarkConfig,
    *,
    available_now: bool | None = None,
    max_duration: timedelta | None = None,
    stop: threading.Event | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    spark: SparkSession | None = None,
    replay_from: datetime | None = None,
) -> RunResult:
    """Run the pipeline (the parameters of run_pipeline) after the checks a restart needs.

    Interrupted recoveries, rollbacks, sweeps or repartition swaps are finished first (their journals); a recovered
    checkpoint keeps its replay point; a lost checkpoint next to a committed sink fails or recovers
    as `[checkpoint] on_missing` says; files of a killed batch move aside before its re-run.
    """
    from tidemark.formats import finish_checkpoint_swaps
    from tidemark.sources import source_of

    source_of(config).check()
    finish_checkpoint_swaps(config.checkpoint.location)  # a `state repartition` killed during its swap
    run = partial(
        run_pipeline,
        available_now=available_now,
        max_duration=max_duration,
        stop=stop,
        on_progress=on_progress,
        on_warning=on_warning,
        spark=spark,
    )
    sink = sink_of(config)
    if not sink.vouches(Tool.FAILOVER) or sink.unresolved() is not None:
        # A plain run; a recovered checkpoint keeps its replay filter, so a restart keeps the query it replayed with.
        # A catalog table whose location no run has recorded yet is first resolved by this run; a new checkpoint on
        # a table that already holds this pipeline's output is refused there (sinks/delta.py, transaction).
        marker = read_recovery_marker(parse_location(config.checkpoint.location))
        return run(config, replay_from=replay_from or (marker.resume_from if marker is not None else None))
    finish_interrupted_moves(config)
    paths = pipeline_locations(config)
    replay_from = replay_from or prepare_failover(config, spark)
    run_config = config
    if replay_from is not None and checkpoint_state(paths.checkpoint) is not CheckpointStatus.PRESENT:
        # A recovery whose replay never committed a batch: the same replay again, from the marker's start offsets.
        marker = read_recovery_marker(paths.checkpoint)
        run_config = replay_config(config, replay_from, marker.source_offsets if marker is not None else None)
    result = run(run_config, replay_from=replay_from)
    if finish_pending(paths.checkpoint, paths.sink):
        log.warning("added the files that survived the recovery to the sink log of %s", paths.sink)
    return result
