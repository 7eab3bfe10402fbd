"""The phases of a run: catch-up queries sized from the backlog, then the steady-state query.

Spark reads `maxFilesPerTrigger` (`maxOffsetsPerTrigger`) once, when a query starts. So a run that is behind starts
an available-now query with the catch-up size, which reads exactly what is present at its start and stops; a
processing-time run then plans again (data may have arrived meanwhile) and finally starts its steady-state query
with the source's own per-trigger limit. The source sizes the plan (the CatchesUp capability); this module
measures what every plan needs (the recent batches, the slots, the target, the memory ceiling) and runs the
phases. The watermark, state and sink log carry over between the queries through the
checkpoint, as they do across any restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.context import PipelineContext
from tidemark.errors import TidemarkError
from tidemark.formats import Checkpoint
from tidemark.monitor.watchdog import default_stuck_after
from tidemark.pipeline.backlog import peak_state_bytes, recent_progress
from tidemark.pipeline.catchup import memory_ceiling_bytes
from tidemark.sizing.load import conf_from_config
from tidemark.sources import CatchesUp, CatchUpContext, CatchUpPlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# A backlog that refills faster than catch-up drains it still gets the steady-state query after this many.
MAX_CATCH_UP_PHASES = 5


@dataclass(frozen=True)
class RunPhase:
    """One streaming query of a run: its config (with the per-trigger limit it uses) and trigger."""

    config: TidemarkConfig
    available_now: bool
    plan: CatchUpPlan | None  # the plan that chose it; None when catch-up is off

    @property
    def spark_conf(self) -> dict[str, str]:
        """Settings for this query only (a file catch-up's balanced split and listing), as its plan says."""
        return self.plan.spark_conf(self.config) if self.plan is not None else {}


def catch_up_context(config: TidemarkConfig) -> CatchUpContext:
    """Measure what every catch-up plan needs: the recent batches, the task slots, the target, the memory ceiling."""
    assert config.trigger.target_batch_duration is not None
    checkpoint = Checkpoint.open(config.checkpoint.location)
    query_id = checkpoint.query_id() if checkpoint.exists() else None
    history = recent_progress(config.monitor_dir, query_id)
    conf = conf_from_config(config)
    # A catch-up batch must not look stuck to the watchdog: at most half its limit.
    stuck_after = default_stuck_after(config.trigger.interval, config.monitor.stuck_after)
    target = min(config.trigger.target_batch_duration, stuck_after / 2)
    state_bytes = peak_state_bytes(history)
    return CatchUpContext(
        target=target,
        task_slots=conf.executors * conf.cores,
        history=tuple(history),
        memory_ceiling=lambda expansion: memory_ceiling_bytes(conf, state_bytes, expansion),
    )


def run_phases(
    pipeline: PipelineContext,
    available_now: bool,
    on_plan: Callable[[CatchUpPlan], None] | None = None,
    spark: SparkSession | None = None,
) -> Iterator[RunPhase]:
    """The queries a run starts, one at a time; the caller stops asking when a query fails or the run must stop."""
    config, source = pipeline.config, pipeline.source
    if (
        config.trigger.target_batch_duration is None
        or not isinstance(source, CatchesUp)
        or source.catch_up_gap(spark) is not None
    ):
        yield RunPhase(config, available_now, None)
        return
    previous: frozenset[object] | None = None
    for _ in range(MAX_CATCH_UP_PHASES):
        try:
            plan, pending = source.plan_catch_up(spark, catch_up_context(config))
        except (TidemarkError, OSError) as exc:
            log.warning("catch-up: cannot measure the backlog (%s); reading it at the steady-state size", exc)
            break
        # A catch-up query that took none of what it was planned for (options tidemark does not model, such as
        # pathGlobFilter or maxFileAge) must not be planned again.
        stalled = previous is not None and pending is not None and previous <= pending
        if on_plan is not None:
            on_plan(plan)
        log.info("%s", plan.describe())
        if not plan.active or stalled:
            if available_now:  # the first plan of an available-now run, inactive (it never stalls)
                yield RunPhase(config, True, plan)
                return
            break
        previous = pending
        yield RunPhase(plan.phase_config(config), True, plan)
        if available_now:
            return
    yield RunPhase(config, available_now, None)
