"""`tidemark run` with failover around it: finish interrupted moves, recover a lost checkpoint, then run.

Failover wraps the run rather than being called from inside it, so the pipeline package does not
depend on recovery (which itself runs the pipeline to replay).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tidemark.config import SinkFormat, TidemarkConfig
from tidemark.formats import CheckpointStatus
from tidemark.pipeline.run import RunResult, run_pipeline
from tidemark.recovery.apply import finish_interrupted_moves
from tidemark.recovery.archive import pipeline_locations
from tidemark.recovery.auto import prepare_failover
from tidemark.recovery.marker import finish_pending
from tidemark.recovery.plan import checkpoint_state
from tidemark.recovery.replay import replay_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def run_with_failover(config: TidemarkConfig, *, spark: SparkSession | None = None, **options: Any) -> RunResult:
    """Run the pipeline (options as for run_pipeline) after the checks a restart needs.

    Interrupted recoveries, rollbacks or sweeps are finished first (their journals); a recovered
    checkpoint keeps its replay point; a lost checkpoint next to a committed sink fails or recovers
    as `[checkpoint] on_missing` says; files of a killed batch move aside before its re-run.
    """
    from tidemark.pipeline.sources import check_source_path

    check_source_path(config)
    if config.sink.format is not SinkFormat.PARQUET or not config.sink.path:
        return run_pipeline(config, spark=spark, **options)
    finish_interrupted_moves(config)
    paths = pipeline_locations(config)
    replay_from = options.pop("replay_from", None) or prepare_failover(config, spark)
    run_config = config
    if replay_from is not None and checkpoint_state(paths.checkpoint) is not CheckpointStatus.PRESENT:
        run_config = replay_config(config, replay_from)  # a recovery whose replay never committed a batch
    result = run_pipeline(run_config, spark=spark, replay_from=replay_from, **options)
    if finish_pending(paths.checkpoint, paths.sink):
        log.warning("added the files that survived the recovery to the sink log of %s", paths.sink)
    return result
