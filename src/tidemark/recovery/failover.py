"""Failover, a step of `tidemark run` (a pipeline.start.Prestart): finish interrupted moves, recover a lost
checkpoint, keep a recovered checkpoint's replay point; after the run, add a recovery's surviving files.

It joins the run as a prestart rather than being called from inside it, so the pipeline package does not
depend on recovery (which itself runs the pipeline to replay).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from tidemark.context import PipelineContext
from tidemark.formats import CheckpointStatus, read_recovery_marker
from tidemark.pipeline.run import RunResult
from tidemark.pipeline.start import Launch, StartPoint
from tidemark.recovery.apply import finish_interrupted_moves
from tidemark.recovery.auto import prepare_failover
from tidemark.recovery.plan import checkpoint_state
from tidemark.recovery.replay import replay_config
from tidemark.sinks import Tool
from tidemark.storage import parse_location

log = logging.getLogger(__name__)


class Failover:
    """The checks and repairs a restart needs before the query, and what a recovery leaves for after it.

    Interrupted recoveries, rollbacks or sweeps are finished first (their journals); a recovered
    checkpoint keeps its replay point; a lost checkpoint next to a committed sink fails or recovers as
    `[checkpoint] on_missing` says; files of a killed batch move aside before its re-run. One per run.
    """

    def __init__(self) -> None:
        self._guarded = False  # before() took the failover route (a sink recovery vouches for, resolved)

    def before(self, launch: Launch, point: StartPoint) -> StartPoint:
        """Where the query starts after failover: the point, a recovered checkpoint's replay, or a recovery's."""
        pipeline = launch.pipeline  # a `state repartition` killed during its swap was finished by run_pipeline
        config, sink = pipeline.config, pipeline.sink
        if not sink.vouches(Tool.FAILOVER) or sink.unresolved() is not None:
            # A plain run; a recovered checkpoint keeps its replay filter, so a restart keeps the query it replayed
            # with. A catalog table whose location no run has recorded yet is first resolved by this run; a new
            # checkpoint on a table that already holds this pipeline's output is refused there (sinks/delta/sink.py).
            marker = read_recovery_marker(parse_location(config.checkpoint.location))
            resume = point.replay_from or (marker.resume_from if marker is not None else None)
            return replace(point, replay_from=resume)
        self._guarded = True
        finish_interrupted_moves(pipeline)
        paths = pipeline.locations()
        replay_from = point.replay_from or prepare_failover(launch)
        if replay_from is not None and checkpoint_state(paths.checkpoint) is not CheckpointStatus.PRESENT:
            # A recovery whose replay never committed a batch: the same replay again, from the marker's offsets.
            marker = read_recovery_marker(paths.checkpoint)
            offsets = marker.source_offsets if marker is not None else None
            return StartPoint(PipelineContext.of(replay_config(pipeline, replay_from, offsets)), replay_from)
        return replace(point, replay_from=replay_from)

    def after(self, launch: Launch, result: RunResult) -> None:
        """A recovery's surviving files join the sink log once its replay committed."""
        del result
        if not self._guarded:
            return
        pipeline = launch.pipeline
        paths = pipeline.locations()
        if pipeline.sink.finish_recovery(paths.checkpoint):
            log.warning("added the files that survived the recovery to the sink log of %s", paths.sink)
