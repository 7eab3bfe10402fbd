"""Run the pipeline: start the query, report each batch, stop gracefully on a deadline or signal."""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from types import FrameType
from typing import TYPE_CHECKING, Any

from tidemark.compat import UTC, StrEnum
from tidemark.config import AggregationKind, TidemarkConfig
from tidemark.context import PipelineContext
from tidemark.errors import TidemarkError
from tidemark.monitor.events import EventKind, json_listener
from tidemark.pipeline.listener import ProgressHook, RunCounters, make_handler
from tidemark.pipeline.phases import run_phases
from tidemark.pipeline.query import start_query

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from tidemark.monitor.listener import RunMonitor
    from tidemark.monitor.rocksdb_health import CrawlWatch
    from tidemark.pipeline.owed_batch import OwedBatch
    from tidemark.pipeline.start import JarsFetch, Launch, Prestart, StartPoint
    from tidemark.sizing.store_start import StartPlan
    from tidemark.sources import SourceStart

log = logging.getLogger(__name__)
# Query starts after the first in one phase: the re-run of a batch and then the no-data batch it owed are each a
# batch a restart runs from the offset log (on Spark 4.1 each fails its progress report after it committed).
_RESTARTS = 2
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"


class StopReason(StrEnum):
    """Why a run ended."""

    FINISHED = "finished"  # available-now: everything there was got processed
    MAX_DURATION = "max-duration"
    SIGNAL = "signal"
    REQUESTED = "requested"


class PipelineFailed(TidemarkError):
    """The streaming query stopped with an error."""


@dataclass(frozen=True)
class RunResult:
    """What a run did."""

    run_id: str
    query_id: str
    stopped: StopReason
    batches: int
    first_batch: int | None
    last_batch: int | None
    input_rows: int
    quarantined: int
    duration: timedelta
    output_path: str | None
    quarantine_path: str
    checkpoint: str
    monitor_log: str | None
    interrupted: bool = False  # a graceful stop found no gap between batches and interrupted one
    warnings: tuple[str, ...] = ()


def new_run_id() -> str:
    """A sortable, unique id for one run of the pipeline."""
    return f"{datetime.now(tz=UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


@contextmanager
def _stop_on_signals(stop: threading.Event, reasons: list[StopReason]) -> Iterator[None]:
    """SIGTERM/SIGINT ask for a graceful stop; a second one stops at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        del frame
        if stop.is_set():
            raise KeyboardInterrupt
        log.warning("signal %d: stopping after the batch in flight", signum)
        reasons.append(StopReason.SIGNAL)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _stop_gracefully(query: StreamingQuery, timeout: timedelta, poll: float = 0.02) -> bool:
    """Stop in a gap between batches, so the batch in flight finishes and commits.

    Returns False when no gap came within timeout (batches overrunning the trigger interval back
    to back) and the batch in flight had to be interrupted: Spark re-runs it on restart, and its
    files never enter the sink's log.
    """
    deadline = time.monotonic() + timeout.total_seconds()
    while query.isActive:
        if not query.status.get("isTriggerActive", False):
            query.stop()
            return True
        if time.monotonic() >= deadline:
            log.warning("no gap between batches within %s: interrupting the batch in flight", timeout)
            query.stop()
            return False
        time.sleep(poll)
    return True


# How long a run waits, after its last batch's progress event, for that batch's hooks to finish.
HOOKS_TIMEOUT_S = 60.0


def _wait_for_listener(
    query: StreamingQuery, counters: RunCounters, lock: threading.Lock, hooks_timeout: float = HOOKS_TIMEOUT_S
) -> None:
    """Progress events arrive asynchronously: wait (bounded) until the last batch was reported and its hooks ran.

    A trigger that found no new data and ran no batch also leaves a lastProgress (Spark's idle progress, the next
    batch's id, no `addBatch` time) but sends no progress event: there is nothing to wait for (the wait was 15 s on
    every restart with nothing new, and on every stop between batches). The hooks (the sink's ledger entry of the
    batch, a caller's) are waited for too: a run that returned while they were still writing to a cloud store had
    them fail at the interpreter's exit ("cannot schedule new futures after shutdown", the seed incident's run 3)
    and the batch's ledger entry was never written."""
    last = query.lastProgress
    if not last or "addBatch" not in (last.get("durationMs") or {}):
        return
    batch = int(last["batchId"])
    deadline = time.monotonic() + 15
    hooks_deadline: float | None = None
    while True:
        now = time.monotonic()
        with lock:
            reported = counters.last_batch is not None and counters.last_batch >= batch
            hooked = counters.hooked_batch is not None and counters.hooked_batch >= batch
        if hooked:
            return
        if reported and hooks_deadline is None:
            hooks_deadline = now + hooks_timeout
        if hooks_deadline is not None and now >= hooks_deadline:
            log.warning("batch %d's progress hooks did not finish within %.0fs", batch, hooks_timeout)
            return
        if hooks_deadline is None and now >= deadline:
            log.warning("the last progress event did not arrive in time; counts may be short by one batch")
            return
        time.sleep(0.05)


def _leak_hook(
    config: TidemarkConfig, monitor: RunMonitor, warnings: list[str], on_warning: Callable[[str], None] | None
) -> ProgressHook:
    """Warn, in the run's output and its progress log, when an operator's state grows without end."""
    from tidemark.stateful.leak import LeakGuard

    guard = LeakGuard(batches=config.monitor.leak_batches)

    def hook(progress: dict[str, Any]) -> None:
        for warning in guard.observe(progress):
            _warn(warning.code, warning.message, warning.fix, monitor, warnings, on_warning)

    return hook


def crawl_watch_for(config: TidemarkConfig, start: StartPlan) -> CrawlWatch:
    """The run's crawl watch: the partitions an executor works on at once, and what it can give RocksDB."""
    from tidemark.monitor.rocksdb_health import CrawlWatch
    from tidemark.sizing.load import conf_from_config

    conf = conf_from_config(config)
    need = start.cap.need if start.cap is not None else None
    partitions = need.partitions if need is not None else config.spark.shuffle_partitions
    active = max(1, min(conf.cores, -(-partitions // max(1, conf.executors))))
    room = start.cap.room.bytes if start.cap is not None else None
    return CrawlWatch(active_partitions=active, room_bytes=room)


def _warn(
    code: str,
    message: str,
    fix: str,
    monitor: RunMonitor,
    warnings: list[str],
    on_warning: Callable[[str], None] | None,
) -> None:
    """One warning in the run's output (the caller's on_warning shows it, else the log), its result and its progress
    log. Not both: the CLI's log handler and its warning line would print it twice."""
    text = f"{code}: {message}; fix: {fix}"
    warnings.append(text)
    monitor.record("warning", code=code, message=message, fix=fix)
    if on_warning is not None:
        log.debug(text)
        on_warning(text)
    else:
        log.warning(text)


def run_pipeline(
    config: TidemarkConfig,
    *,
    available_now: bool | None = None,
    max_duration: timedelta | None = None,
    stop: threading.Event | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    spark: SparkSession | None = None,
    replay_from: datetime | None = None,
    prestarts: Sequence[Prestart] = (),
    launch: Launch | None = None,
    fetch: JarsFetch | None = None,
) -> RunResult:
    """Run the pipeline until its source is drained (available-now), a deadline, a signal or `stop`.

    The library entry of `tidemark run`: its start is planned once (pipeline/start.py), the prestarts (the
    restart check, failover) run on that plan and session before the query and after it, in order. launch: a
    start already planned, whose step this run is (a recovery's or an adoption's replay of its config: the launch's
    session is used, and spark, prestarts and fetch are not); fetch: how a new session's jars are fetched in front
    of the user (the CLI's progress bar).
    """
    from tidemark.formats import finish_checkpoint_swaps
    from tidemark.needs import session_conf
    from tidemark.pipeline.start import StartPoint, launched

    pipeline = PipelineContext.of(config)
    pipeline.source.check()  # before the JVM starts: a wrong path should cost nothing
    options = _Options(new_run_id(), available_now, max_duration, stop or threading.Event(), on_progress, on_warning)
    if launch is not None:
        pipeline.sink.check()
        return _run(launch, StartPoint(pipeline, replay_from), options)
    if fetch is not None:  # the Spark route's one-line refusals (a scheme, a jar) before any storage is read
        session_conf(config, progress=fetch.progress, hint=fetch.hint)
    # A `state repartition` killed during its swap is finished before the plan (or a check) reads the checkpoint.
    finish_checkpoint_swaps(config.checkpoint.location)
    pipeline.sink.check()
    with launched(config, spark) as own:
        point = StartPoint(own.pipeline, replay_from)
        for step in prestarts:
            point = step.before(own, point)
        result = _run(own, point, options)
        for step in prestarts:
            step.after(own, result)
        return result


@dataclass(frozen=True)
class _Options:
    """How run_pipeline was asked to run (its keyword arguments), for its body."""

    run_id: str
    available_now: bool | None
    max_duration: timedelta | None
    stop: threading.Event
    on_progress: Callable[[dict[str, Any]], None] | None
    on_warning: Callable[[str], None] | None


def _run(launch: Launch, point: StartPoint, options: _Options) -> RunResult:
    """The body of run_pipeline: the query of point, on the launch's session."""
    from tidemark.formats import RunLock
    from tidemark.monitor.listener import RunMonitor
    from tidemark.pipeline.reconcile import reconcile_quarantine
    from tidemark.session import runtime_conf

    session, pipeline, start, replay_from = launch.session(), point.pipeline, launch.start, point.replay_from
    config = pipeline.config
    run_id, stop, on_progress, on_warning = options.run_id, options.stop, options.on_progress, options.on_warning
    reasons: list[StopReason] = []
    once = bool(options.available_now) or config.trigger.mode.value == "available-now"
    deadline_after = options.max_duration or config.trigger.max_duration
    source_start = pipeline.source.check_start(session)  # one line for a broker, topic or data-loss problem
    reconcile_quarantine(session, pipeline)
    warnings: list[str] = []

    def monitor_warning(text: str) -> None:
        warnings.append(text)
        if on_warning is not None:
            on_warning(text)

    monitor = RunMonitor(
        session,
        config,
        run_id,
        start=start.as_record(),
        rocksdb_cap_bytes=start.cap.cap_bytes if start.cap is not None else None,
        crawl_watch=crawl_watch_for(config, start),
        on_warning=monitor_warning,
    )
    hooks: list[ProgressHook] = [on_progress] if on_progress else []
    # Spark's own window and session aggregations evict by watermark by construction: their state
    # grows only while it ramps up. Leaks come from per-key logic that forgets to remove state.
    if config.aggregation.kind is AggregationKind.CUSTOM:
        hooks.append(_leak_hook(config, monitor, warnings, on_warning))
    sink = pipeline.sink
    sink_hook = sink.batch_hook()
    if sink_hook is not None:
        hooks.append(sink_hook)
    handle, counters, lock = make_handler(config.pipeline.name, hooks)

    def fan_out(kind: EventKind, event: dict[str, Any]) -> None:
        handle(kind, event)  # first: it takes the quarantine records a batch's observation carried out of the event
        monitor.handle_event(kind, event)

    listener = json_listener(fan_out)
    started = time.monotonic()
    with RunLock(config.checkpoint.location, run_id):
        session.streams.addListener(listener)
        try:
            monitor.start(listen=False)
            if source_start is not None and source_start.lost:
                _record_data_loss(source_start, monitor, warnings, on_warning)
            for finding in (*start.findings, *pipeline.sink.setup_warnings()):
                _warn(finding.code, finding.message, finding.fix, monitor, warnings, on_warning)
            with _stop_on_signals(stop, reasons):
                deadline = started + deadline_after.total_seconds() if deadline_after else None
                clean_stop = True
                failure = None
                # One query, or catch-up queries sized from the backlog and then the steady one (pipeline/phases.py).
                record_plan = lambda plan: monitor.record("catch-up", **asdict(plan))  # noqa: E731
                for phase in run_phases(pipeline, once, record_plan, session):
                    # A catch-up phase's config (its per-trigger limit) has its own context.
                    phased = pipeline if phase.config is config else PipelineContext.of(phase.config)
                    with runtime_conf(session, {**_progress_retention(pipeline), **phase.spark_conf}):
                        planned = None
                        for attempt in range(1 + _RESTARTS):
                            if planned is None:  # else planned when the query before ended
                                _plan_owed_batch(session, pipeline, monitor)
                            planned = None
                            query = start_query(session, phased, phase.available_now, replay_from)
                            monitor.attach(query)
                            while query.isActive:
                                if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                                    if not stop.is_set():
                                        reasons.append(StopReason.MAX_DURATION)
                                    clean_stop = _stop_gracefully(query, config.trigger.effective_stop_timeout)
                                    break
                                try:
                                    query.awaitTermination(1)
                                except Exception:  # it failed: reported below, in one line, from query.exception()
                                    break
                                _write_quarantine(session, pipeline, counters, lock)
                            failure = query.exception()
                            _wait_for_listener(query, counters, lock)
                            _write_quarantine(session, pipeline, counters, lock)
                            if attempt == _RESTARTS or reasons or stop.is_set():
                                break
                            if failure is None:
                                # An available-now query that re-ran a batch its sink had skipped ends owing one.
                                with lock:
                                    seen = dict(counters.newest_event_ms)
                                planned = (
                                    _plan_owed_batch(session, pipeline, monitor, seen) if phase.available_now else None
                                )
                                if planned is None:
                                    break
                            elif _superseded_run(session, pipeline, str(failure), monitor, warnings, on_warning):
                                pass  # the batch runs again; the sink skips what the other run committed
                            elif _restart_after_spark_defect(pipeline, str(failure), monitor, warnings, on_warning):
                                # The failed progress report was the re-run batch's only count of its malformed
                                # rows: they are written from its input now, not at the next start.
                                reconcile_quarantine(session, pipeline)
                            else:
                                break
                    if failure is not None or reasons or stop.is_set():
                        break
        finally:
            monitor.stop(ended=(reasons[0] if reasons else StopReason.FINISHED if once else StopReason.REQUESTED).value)
            session.streams.removeListener(listener)
    if failure is not None:
        raise PipelineFailed(_failure_message(session, pipeline, str(failure))) from None
    with lock:
        return RunResult(
            run_id=run_id,
            query_id=str(query.id),
            stopped=reasons[0] if reasons else (StopReason.FINISHED if once else StopReason.REQUESTED),
            batches=counters.batches,
            first_batch=counters.first_batch,
            last_batch=counters.last_batch,
            input_rows=counters.input_rows,
            quarantined=counters.quarantined,
            duration=timedelta(seconds=time.monotonic() - started),
            output_path=sink.path,
            quarantine_path=config.quarantine.path,
            checkpoint=config.checkpoint.location,
            monitor_log=str(monitor.log_path),
            interrupted=not clean_stop,
            warnings=tuple(warnings),
        )


def _plan_owed_batch(
    session: SparkSession, pipeline: PipelineContext, monitor: RunMonitor, seen: Mapping[int, int] | None = None
) -> OwedBatch | None:
    """Plan the no-data batch a stopped query owed (pipeline/owed_batch.py) before a query starts, and say so.

    seen: the newest event time Spark itself reported (progress `eventTime.max`) for batches this run executed; a
    batch in it is not read again (its input is read only when Spark did not run its plan, as for a re-run the sink
    skipped)."""
    from tidemark.formats import Checkpoint
    from tidemark.pipeline.owed_batch import plan_owed_batch_at
    from tidemark.pipeline.reconcile import batch_newest_event_ms
    from tidemark.secrets import redact

    config = pipeline.config

    def newest(batch: int) -> int | None:
        if seen is not None and batch in seen:
            return seen[batch]
        try:
            return batch_newest_event_ms(session, pipeline, Checkpoint.open(config.checkpoint.location), batch)
        except Exception as exc:  # the query reports a source problem itself, in one line
            text = _first_line(redact(str(exc)))
            log.warning("batch %d's input could not be read again to check its watermark: %s", batch, text)
            return None

    if str(session.conf.get(NO_DATA_BATCHES, "true")).strip().lower() == "false":
        return None  # the user turned Spark's no-data batches off: none is owed
    delay_ms = round(config.event_time.watermark.total_seconds() * 1000)
    owed = plan_owed_batch_at(config.checkpoint.location, delay_ms, newest)
    if owed is None:
        return None
    log.info(
        "batch %d: the no-data batch the stopped query owed after batch %d (watermark %d -> %d ms%s), planned so "
        "the windows it closes are written now",
        owed.batch,
        owed.after,
        owed.previous_watermark_ms,
        owed.watermark_ms,
        ", read again from its input: the re-run was skipped by the sink" if owed.recomputed else "",
    )
    monitor.record("owed-batch", **asdict(owed))
    return owed


def _progress_retention(pipeline: PipelineContext) -> dict[str, str]:
    """Fewer progress events kept on the driver by a query whose observation can carry malformed records (up to
    quarantine.INLINE_CHARS a batch, for a source whose records are named by their origin); tidemark's listener
    has every event already."""
    from tidemark.pipeline.quarantine import RECENT_PROGRESS

    key = "spark.sql.streaming.numRecentProgressUpdates"
    if not pipeline.source.origin_names_record or key in pipeline.config.spark.conf:
        return {}
    return {key: str(RECENT_PROGRESS)}


def _write_quarantine(
    session: SparkSession, pipeline: PipelineContext, counters: RunCounters, lock: threading.Lock
) -> None:
    """Write the malformed records of the batches reported since the last call (the listener only counts)."""
    from tidemark.pipeline.reconcile import quarantine_batches

    with lock:
        counts = dict(counters.malformed)
        records = dict(counters.records)
    if not counts:
        return
    try:
        quarantine_batches(session, pipeline, upto=max(counts), counts=counts, records=records)
    except Exception as exc:  # never the run's end: the next start re-reads what is not written
        log.warning("writing the quarantine failed (the next start retries): %s", _first_line(str(exc)))
        return
    with lock:
        for batch in counts:
            counters.malformed.pop(batch, None)
            counters.records.pop(batch, None)


# Spark's own words for two runs of one query writing the same batch of its log: the batch's file was there before
# this run wrote it (CONCURRENT_STREAM_LOG_UPDATE), or the other run's rename won while this one wrote it
# (HDFSMetadataLog.write's _LEGACY_ERROR_TEMP_2207, which has no error class in its text).
_CONCURRENT_LOG_UPDATES = ("CONCURRENT_STREAM_LOG_UPDATE", "Multiple streaming queries are concurrently using")


def _superseded_run(
    session: SparkSession,
    pipeline: PipelineContext,
    failure: str,
    monitor: RunMonitor,
    warnings: list[str],
    on_warning: Callable[[str], None] | None,
) -> bool:
    """True when, over Spark Connect, the query failed because an earlier run of it was still writing a batch: a
    killed client's query goes on on the server until Spark stops it for this run (stopActiveRunOnRestart), and
    its batch in flight may commit beside this run's. The batch runs again; the sink and Spark's log keep it once."""
    from tidemark.connect import is_connect

    markers = (*_CONCURRENT_LOG_UPDATES, *pipeline.sink.concurrent_write_errors)
    if not is_connect(session) or not any(marker in failure for marker in markers):
        return False
    message = (
        "an earlier run of this query was still running on the Spark Connect server (its client was killed) and "
        "wrote the same batch: Spark stopped it, the batch runs again"
    )
    _warn("SUPERSEDED_RUN", message, "none needed", monitor, warnings, on_warning)
    return True


def _restart_after_spark_defect(
    pipeline: PipelineContext,
    failure: str,
    monitor: RunMonitor,
    warnings: list[str],
    on_warning: Callable[[str], None] | None,
) -> bool:
    """True when the query failed on a known Spark defect of its source after its batch committed, and may simply
    start again (the source says which: Source.restartable_failure)."""
    message = pipeline.source.restartable_failure(failure)
    if message is None:
        return False
    _warn("SPARK_DEFECT", message, "none needed (Spark 4.2 fixed it)", monitor, warnings, on_warning)
    return True


def _record_data_loss(
    start: SourceStart, monitor: RunMonitor, warnings: list[str], on_warning: Callable[[str], None] | None
) -> None:
    """fail_on_data_loss = false and records were gone: say so, and keep each lost range in the progress log."""
    from tidemark.formats import EventType

    text = start.warning
    log.warning(text)
    warnings.append(text)
    ranges = [dict(r) for r in start.lost]
    monitor.record(EventType.DATA_LOSS, endpoint=start.endpoint, ranges=ranges, offsets=start.lost_records)
    if on_warning is not None:
        on_warning(text)


def _failure_message(session: SparkSession, pipeline: PipelineContext, text: str) -> str:
    """One line for a failed query: a source's problem in its terms (a Kafka broker's), else Spark's first line."""
    from tidemark.secrets import redact

    line = pipeline.source.describe_failure(session, text)
    if line is None:
        from tidemark.spark.credentials import explain_storage_failure

        reason = explain_storage_failure(text) or _first_line(text)
        line = f"the streaming query failed: {reason} (run with --debug for the Spark trace)"
    return redact(line)


# The exception a foreachBatch function raised, as py4j hands it back inside Spark's error ("...Python Proxy...").
_PYTHON_RAISED = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Exception|Error)): (.+)$")


def _first_line(text: str) -> str:
    if "Python Proxy" in text:
        lines = [line.strip() for line in text.splitlines()]
        for index in range(len(lines) - 1, -1, -1):
            match = _PYTHON_RAISED.match(lines[index])
            if match and not match.group(1).startswith("Py4J"):
                details = [ln for ln in lines[index + 1 : index + 5] if ln and not ln.startswith(("at ", "File "))]
                return " ".join([f"{match.group(1)}: {match.group(2)}", *details])[:400]
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:400]
    return text[:400]
