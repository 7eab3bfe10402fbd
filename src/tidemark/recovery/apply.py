"""Apply a recovery plan: archive, replay from the resume point into a fresh checkpoint, repair the sink log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.context import PipelineContext
from tidemark.errors import CheckpointError
from tidemark.formats import (
    RECOVERY_PLAN_FILE,
    Checkpoint,
    CheckpointStatus,
    RecoveryMarker,
    archive_marker,
    place_archived_marker,
    read_recovery_marker,
)
from tidemark.recovery.archive import finish_interrupted, perform
from tidemark.recovery.plan import RecoveryPlan, checkpoint_state, ensure_not_running
from tidemark.recovery.replay import replay_config
from tidemark.sinks import SinkCheck
from tidemark.storage import Location, open_storage, parse_location
from tidemark.storage.journal import JournalResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.pipeline.run import RunResult
    from tidemark.pipeline.start import Launch


@dataclass(frozen=True)
class RecoveryResult:
    """What an applied recovery did."""

    plan: RecoveryPlan
    applied: bool
    replay: RunResult | None
    injected_files: int | None  # None: no batch committed yet, the next run adds them (0: the sink keeps its log)
    verification: SinkCheck | None
    own_log: bool = False  # the sink keeps its own log (a table's): it keeps listing what survived, nothing to add


def finish_interrupted_moves(pipeline: PipelineContext) -> list[JournalResult]:
    """Finish the journals a crashed recovery, rollback or sweep left; a finished recovery gets its marker."""
    paths = pipeline.locations()

    def after(result: JournalResult) -> None:
        if result.purpose == "recovery" and "archive" in result.meta:
            _place(paths.checkpoint, parse_location(result.meta["archive"]))

    return finish_interrupted(paths, after)


def _place(checkpoint: Location, archive: Location) -> None:
    place_archived_marker(checkpoint, archive)


def archive_and_mark(pipeline: PipelineContext, plan: RecoveryPlan) -> None:
    """Move everything aside and leave a fresh checkpoint that carries the resume point.

    The marker and the plan go into the archive first; the moves are journaled and the marker is placed
    in the fresh checkpoint before the journal goes, so a crash part-way is finished by the next
    `recover --apply` or `run`, which then replays from the same resume point.
    """
    paths = pipeline.locations()
    ensure_not_running(paths.checkpoint)
    entries = pipeline.sink.surviving_entries(Checkpoint.open(paths.checkpoint), plan.surviving_files)
    marker = RecoveryMarker(plan.resume_from, plan.archive, entries, injected=False, source_offsets=plan.source_offsets)
    archive = parse_location(plan.archive)
    kept = open_storage(archive)
    kept.write_atomic(RECOVERY_PLAN_FILE, plan.to_json().encode("utf-8"))
    archive_marker(archive, marker)
    perform(
        list(plan.moves),
        paths,
        "recovery",
        {"archive": plan.archive},
        after=lambda _: _place(paths.checkpoint, archive),
    )
    place_archived_marker(paths.checkpoint, archive)


def apply_recovery(plan: RecoveryPlan, launch: Launch) -> RecoveryResult:
    """Archive, replay (available-now) from the resume point, add the surviving files to the new log, verify."""
    archive_and_mark(launch.pipeline, plan)
    return _replay(plan, launch)


def _replay(plan: RecoveryPlan, launch: Launch) -> RecoveryResult:
    """The replay, a run on the recovery's launch (its planned store and session)."""
    from tidemark.pipeline.run import run_pipeline
    from tidemark.steps import step

    pipeline = launch.pipeline
    paths = pipeline.locations()
    with step(f"replaying from {plan.resume_from.isoformat()}: batches") as advance:
        replay = run_pipeline(
            replay_config(pipeline, plan.resume_from, plan.source_offsets),
            available_now=True,
            launch=launch,
            replay_from=plan.resume_from,
            on_progress=lambda _: advance(1),
        )
    from tidemark.recovery.audit import key_columns

    sink = pipeline.sink
    injected = 0 if sink.keeps_own_log else sink.finish_recovery(paths.checkpoint)
    check = sink.check_rows(key_columns(pipeline.config), launch.session())
    return RecoveryResult(plan, True, replay, injected, check, own_log=sink.keeps_own_log)


def interrupted_recovery(pipeline: PipelineContext) -> RecoveryPlan | None:
    """The plan of a recovery whose moves are done but whose replay never committed a batch, or None."""
    paths = pipeline.locations()
    marker = read_recovery_marker(paths.checkpoint)
    if marker is None or checkpoint_state(paths.checkpoint) is CheckpointStatus.PRESENT:
        return None
    data = open_storage(parse_location(marker.archive)).read_bytes(RECOVERY_PLAN_FILE)
    if data is None:
        return None
    try:
        return RecoveryPlan.from_json(data.decode("utf-8"))
    except (ValueError, KeyError, TypeError) as exc:
        msg = f"the recovery plan {marker.archive}/{RECOVERY_PLAN_FILE} is unreadable: fix or remove it"
        raise CheckpointError(msg) from exc


def plan_from_source(session: SparkSession, pipeline: PipelineContext, per_key: bool = False) -> RecoveryPlan:
    """The recovery plan, with what the source says: where its replay starts (a Kafka source's per-partition
    offsets, found for the sink's resume point) and the newest event time there is to replay (which bounds
    max_lookback)."""
    from dataclasses import replace

    from tidemark.recovery.plan import plan_recovery
    from tidemark.sources import EPOCH

    source = pipeline.source.replayable()
    start = source.replay_start(
        session, lambda: plan_recovery(pipeline, None, per_key=per_key).unclamped_resume_from or EPOCH
    )
    plan = plan_recovery(pipeline, source.newest_event(session, start), per_key=per_key)
    return replace(plan, source_offsets=start.offsets, replay=source.describe_replay(plan.resume_from, start))


def recover_pipeline(
    config: TidemarkConfig,
    *,
    apply: bool = False,
    per_key: bool = False,
    spark: SparkSession | None = None,
    precheck: Callable[[Launch], None] | None = None,
) -> RecoveryResult:
    """Plan a recovery from the sink (and, with apply, carry it out); the one entry point of the CLI.

    With apply, an earlier recovery that a crash interrupted is finished first (its moves, then its
    replay from the same resume point) instead of planning a new one from a half-moved sink.
    """
    from tidemark.pipeline.sink_check import require_matching_sink
    from tidemark.pipeline.start import launched
    from tidemark.recovery.replay import check_replayable

    with launched(config, spark) as launch:
        check_replayable(launch.pipeline)  # before any Spark: a source that cannot replay is refused first
        launch.locate_sink()  # a catalog table whose checkpoint (which recorded its folder) was lost
        pipeline = launch.pipeline
        # Every precondition before anything moves (dry run too: a plan for a sink it cannot rewrite would mislead).
        ensure_not_running(pipeline.locations().checkpoint)
        require_matching_sink(
            pipeline,
            "tidemark recover",
            "recover rewrites windowStart partitions of a sink this config's query wrote; to move another job's "
            "sink and checkpoint over, see docs/adopt.md",
        )
        if apply:
            finish_interrupted_moves(pipeline)
        if precheck is not None:
            # The caller's own refusal (the checkpoint written by another query), before any move.
            precheck(launch)
        if apply:
            resumed = interrupted_recovery(pipeline)
            if resumed is not None:
                return _replay(resumed, launch)
        plan = plan_from_source(launch.session(), pipeline, per_key=per_key)
        if not apply:
            return RecoveryResult(plan, False, None, None, None)
        return apply_recovery(plan, launch)
