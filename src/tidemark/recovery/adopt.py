"""`tidemark adopt`: move a plain-Spark window job over to tidemark with nothing lost and nothing twice.

The old job (stopped) has emitted every window whose end its last committed batch's watermark E reached; those
stay in its sink, untouched. tidemark starts a fresh checkpoint and sink and replays, from the landing files the
old job read plus the ones that arrived since, every window that was still open: the windows starting at or
after R, the first window start whose window ends after E. A recovery marker in the new checkpoint keeps that
replay point for every later run (the same filter recovery uses), so no window lands in both sinks.

Where the old job stood is its source position: for the file source, the files its log lists through the last
committed batch (they must all still be there, or open windows would miss events). A Kafka source plugs in as
another `SourcePosition` (sources/kafka/replay.py): its committed offsets (offsets/N), with the replay started where
the old job's offsets log says the open windows' events begin (else by Kafka's offsets-for-times), as `recover`
does; its partitions' records from there must still be in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NoReturn

from tidemark.compat import UTC
from tidemark.config import AggregationKind, TidemarkConfig
from tidemark.errors import CheckpointError, InputError, UsageError
from tidemark.formats import (
    Checkpoint,
    RecoveryMarker,
    ensure_unlocked,
    read_recovery_marker,
    what_is_there,
    write_recovery_marker,
)
from tidemark.recovery.archive import pipeline_locations
from tidemark.recovery.replay import EPOCH, replay_config
from tidemark.sinks import SinkWindows, Tool, reader_of, sink_of
from tidemark.sources import SourcePosition, source_of
from tidemark.storage import Location, open_storage, parse_location

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

    from tidemark.pipeline.run import RunResult
    from tidemark.pipeline.start import Launch


@dataclass(frozen=True)
class AdoptionPlan:
    """What `tidemark adopt` will do; nothing changes until it is applied."""

    pipeline: str
    old_checkpoint: str
    old_batch: int
    emitted_through: datetime | None  # the watermark the old job's last batch emitted (evicted) windows with
    committed_watermark: datetime | None
    resume_from: datetime
    replay: str
    position: SourcePosition | None  # None: a position read through a server (Kafka), not read yet (it needs Spark)
    old_sink: SinkWindows | None
    checkpoint: str
    sink: str
    notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class AdoptionResult:
    """What an applied adoption did."""

    plan: AdoptionPlan
    applied: bool
    replay: RunResult | None


def _time(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms > 0 else None


def first_open_window(emitted_through: datetime | None, size: timedelta, slide: timedelta) -> datetime:
    """The first window start (epoch grid of the slide) whose window ends after the watermark windows were
    emitted with: windows from it on were still open in the old job; every earlier one is in its sink."""
    if emitted_through is None:
        return EPOCH
    steps = (emitted_through - size - EPOCH) // slide
    return EPOCH + (steps + 1) * slide


def _refuse(message: str) -> NoReturn:
    msg = f"tidemark adopt refused: {message}. Nothing was changed"
    raise InputError(msg)


def _check_new_locations(config: TidemarkConfig, old_checkpoint: Location, old_sink: Location | None) -> None:
    paths = pipeline_locations(config, Tool.ADOPT)
    if paths.checkpoint.same_place(old_checkpoint):
        _refuse("[checkpoint] location is the old job's checkpoint: give tidemark a new folder")
    sink = sink_of(config)
    in_place = old_sink is not None and paths.sink.same_place(old_sink)
    if in_place and not sink.adopts_in_place:
        _refuse("[sink] path is the old job's sink: tidemark writes the windows from the cut-over to a new folder")
    problem = what_is_there(open_storage(paths.checkpoint), empty_ok=True)
    if problem is not None or Checkpoint.open(paths.checkpoint).offset_batches():
        _refuse(f"{paths.checkpoint.uri} already holds something: [checkpoint] location must be a new folder")
    if read_recovery_marker(paths.checkpoint) is not None:
        _refuse(f"{paths.checkpoint.uri} already carries a replay point: it was adopted or recovered before")
    if in_place:
        if sink.holds_output():
            _refuse(f"the table {paths.sink.uri} already holds this pipeline's commits: it was adopted before")
        return
    store = open_storage(paths.sink)
    if store.exists("") and any(True for _ in store.list_files()):
        also = " (or the old job's table)" if sink.adopts_in_place else ""
        _refuse(f"the sink {paths.sink.uri} already holds files: [sink] path must be a new folder{also}")


def _old_sink_windows(config: TidemarkConfig, old_sink: Location) -> SinkWindows:
    """The windows the old job's sink holds: a table read by its own connector (in place: it is the config's
    sink), a folder of plain files by their committed files."""
    store = open_storage(old_sink)
    owner = reader_of(store)
    if not owner.adopts_in_place:
        return owner.old_windows(store)
    sink = sink_of(config)
    if type(sink) is not owner or not pipeline_locations(config, Tool.ADOPT).sink.same_place(old_sink):
        _refuse(
            f"the old sink {old_sink.uri} is a {owner.format.value} table: to adopt it in place, set [sink] format = "
            f'"{owner.format.value}" and point [sink] at it (its path, or the catalog table it is)'
        )
    held = sink.held_windows()
    return SinkWindows(held.uri, len(held.files), max(held.rows, 0), held.newest_start, held.read_from, ())


def plan_adoption(
    config: TidemarkConfig,
    old_checkpoint: str,
    old_sink: str | None = None,
    *,
    read_old_sink: bool = True,
    spark: SparkSession | None = None,
) -> AdoptionPlan:
    """Read the old job's checkpoint (and sink), check every precondition, and work out the replay point.

    read_old_sink=False: the old sink's location is checked, its windows are not read yet (they are judged by the
    config's window, which the caller checks against the old job first). A Kafka job's position is read through
    the broker, so only with a Spark session (without one it is left None)."""
    agg = config.aggregation
    if agg.kind is not AggregationKind.WINDOW or agg.window is None:
        msg = 'tidemark adopt moves window aggregations ([aggregation] kind = "window")'
        raise UsageError(msg)
    old = Checkpoint.open(old_checkpoint)
    old.require()
    ensure_unlocked(old.uri, old.store)  # a plain Spark job still running on it shows as a fresh, uncommitted batch
    batch = old.latest_committed_batch()
    old_sink_location = parse_location(old_sink) if old_sink else None
    _check_new_locations(config, old.store.location, old_sink_location)
    emitted = _time(old.offset(batch).watermark_ms)
    committed = _time(old.commit(batch).next_watermark_ms)
    resume = first_open_window(emitted, agg.window, agg.slide or agg.window)
    source = source_of(config).replayable()
    position = source.adoption_position(spark, old, batch, resume)
    problem = position.refusal(resume) if position is not None else None
    if problem is not None:
        _refuse(problem)
    windows = _old_sink_windows(config, old_sink_location) if old_sink_location is not None and read_old_sink else None
    notes: list[str] = []
    if windows is not None:
        if windows.newest_start is not None and windows.newest_start >= resume:
            _refuse(
                f"the old sink {windows.uri} holds a window starting {windows.newest_start.isoformat()}, at or "
                f"after the replay point {resume.isoformat()}: those windows would be written twice"
            )
        if windows.copied:
            notes.append(
                f"the old sink's log names another folder's files (a copied or moved sink): all "
                f"{windows.files} data file(s) in {windows.uri} were read as its windows"
            )
        if windows.uncommitted:
            notes.append(
                f"the old sink holds {len(windows.uncommitted)} data file(s) its log does not list "
                f"(a failed batch's, e.g. {windows.uncommitted[0]}): Spark readers skip them, plain Parquet readers "
                "count them; move them aside before reading the old sink without Spark"
            )
    else:
        notes.append("no --old-sink given: the old job's output was not audited")
    if committed is not None and emitted is not None and committed > emitted:
        notes.append(
            f"the old job committed watermark {committed.isoformat()} but emitted only to {emitted.isoformat()} "
            "(no batch ran after its last one): the windows in between are replayed, not lost"
        )
    paths = pipeline_locations(config, Tool.ADOPT)
    return AdoptionPlan(
        pipeline=config.pipeline.name,
        old_checkpoint=old.uri,
        old_batch=batch,
        emitted_through=emitted,
        committed_watermark=committed,
        resume_from=resume,
        replay=source.describe_replay(resume, position.replay_start() if position is not None else None),
        position=position,
        old_sink=windows,
        checkpoint=paths.checkpoint.uri,
        sink=paths.sink.uri,
        notes=tuple(notes),
    )


def adopt_job(
    config: TidemarkConfig,
    old_checkpoint: str,
    old_sink: str | None = None,
    *,
    apply: bool = False,
    spark: SparkSession | None = None,
    precheck: Callable[[Launch], None] | None = None,
) -> AdoptionResult:
    """Plan the cut-over and, with apply, leave the replay point in a new checkpoint and replay the open windows."""
    from tidemark.pipeline.run import run_pipeline
    from tidemark.pipeline.start import launched
    from tidemark.steps import step

    # Without --old-sink, every refusal that needs no Spark first. With it, the old sink is judged by the config's
    # window: a config that describes another job (its window, its keys) must be told as that, so the caller's
    # precheck comes before the sink's refusal.
    plan = plan_adoption(config, old_checkpoint, old_sink, read_old_sink=precheck is None)
    if not apply and precheck is None and plan.position is not None:
        return AdoptionResult(plan, False, None)
    # The replay's state is opened with the RocksDB cap `run` would plan; a reused session gets its own settings back.
    with launched(config, spark) as launch:
        if precheck is not None:
            # The caller's own refusal (the config describes another job), before any write.
            precheck(launch)
        if old_sink is not None or plan.position is None:
            plan = plan_adoption(config, old_checkpoint, old_sink, spark=launch.session())
        if not apply:
            return AdoptionResult(plan, False, None)
        paths = pipeline_locations(config, Tool.ADOPT)
        if Checkpoint.open(paths.checkpoint).offset_batches():
            msg = f"{paths.checkpoint.uri} gained batches while the plan was made: nothing was changed"
            raise CheckpointError(msg)
        marker = RecoveryMarker(plan.resume_from, plan.old_checkpoint, (), injected=True)
        write_recovery_marker(paths.checkpoint, marker)
        what = f"replaying the windows open at the cut-over (from {plan.resume_from.isoformat()}): batches"
        with step(what) as advance:
            assert plan.position is not None
            replay = run_pipeline(
                replay_config(launch.pipeline, plan.resume_from, plan.position.replay_offsets),
                available_now=True,
                launch=launch,
                replay_from=plan.resume_from,
                on_progress=lambda _: advance(1),
            )
    return AdoptionResult(plan, True, replay)
