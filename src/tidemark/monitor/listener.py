"""RunMonitor: the run's StreamingQueryListener, durable progress log, watchdog and metrics endpoint."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.compat import UTC
from tidemark.formats import ROCKSDB_CAP_FIELD, BatchProgress, EventType, ProgressLogWriter, log_path_for
from tidemark.monitor.events import EventKind, json_listener
from tidemark.monitor.metrics import MetricsRegistry, RunState
from tidemark.monitor.publish import MetricsPublisher
from tidemark.monitor.rocksdb_health import CrawlWatch
from tidemark.monitor.watchdog import (
    RunningStage,
    StuckDiagnosis,
    Watchdog,
    checkpoint_file_counts,
    default_stuck_after,
    latest_planned_batch,
    recent_commits,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from tidemark.config import TidemarkConfig

from tidemark.config.rocksdb import rows_tracked

log = logging.getLogger(__name__)

_RECENT_BATCHES = 10
_TERMINATED_GRACE_SECONDS = 3.0
_Item = tuple[str, datetime, Any]


class RunMonitor:
    """Monitors one run: listener -> queue -> log writer thread; watchdog thread; optional metrics server."""

    def __init__(
        self,
        spark: SparkSession,
        config: TidemarkConfig,
        run_id: str,
        start: dict[str, Any] | None = None,
        rocksdb_cap_bytes: int | None = None,
        crawl_watch: CrawlWatch | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        self.spark = spark
        self.config = config
        self.run_id = run_id
        # What the run started with (provider, RocksDB cap and why): the started line carries it.
        self.start_record = start
        # RocksDB's memory cap of this process: every progress line carries it beside Spark's figures.
        self.rocksdb_cap_bytes = rocksdb_cap_bytes
        # Warns once when RocksDB's reads start going to disk batch after batch (a crawl coming).
        self.crawl_watch = crawl_watch or CrawlWatch()
        self._on_warning = on_warning
        self.log_path = str(log_path_for(config.monitor_dir, run_id))
        self.stuck_after = default_stuck_after(config.trigger.interval, config.monitor.stuck_after)
        self.rows_tracked = rows_tracked(config.spark_conf())
        self.registry = MetricsRegistry(
            config.pipeline.name, run_id, self.stuck_after.total_seconds(), state_rows_tracked=self.rows_tracked
        )
        self._publisher = MetricsPublisher(self.registry, config.monitor, warn=self._warn)
        self.diagnoses: list[StuckDiagnosis] = []
        self._writer = ProgressLogWriter(self.log_path, run_id)
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._recent: deque[BatchProgress] = deque(maxlen=_RECENT_BATCHES)
        self._query: StreamingQuery | None = None
        self._query_id: str | None = None
        self._listener: Any = None
        self._worker: threading.Thread | None = None
        self._watchdog = Watchdog(self.stuck_after, self._on_stuck, self._is_busy)
        self._terminated = threading.Event()
        self._state_lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._idle_logged = False

    @property
    def metrics_port(self) -> int | None:
        """The bound metrics port (None when metrics are off)."""
        return self._publisher.port

    def handle_event(self, kind: EventKind, data: dict[str, Any]) -> None:
        """Take one listener-bus event (its JSON); only enqueues, as it runs on Spark's listener bus."""
        now = datetime.now(UTC)
        ids = {"query_id": str(data.get("id", "")), "query_run_id": str(data.get("runId", ""))}
        if kind is EventKind.PROGRESS:
            self._queue.put((EventType.PROGRESS, now, data.get("progress") or {}))
        elif kind is EventKind.STARTED:
            self._queue.put((EventType.STARTED, now, {**ids, "name": data.get("name")}))
        elif kind is EventKind.IDLE:
            self._queue.put((EventType.IDLE, now, ids))
        else:
            self._queue.put((EventType.TERMINATED, now, {**ids, "exception": data.get("exception")}))

    def start(self, listen: bool = True) -> None:
        """Open the log, start the writer thread, the metrics server and the watchdog.

        With listen, register a listener of its own; without, the caller feeds handle_event (tidemark
        run shares one listener between the pipeline and the monitor).
        """
        if self._started:
            return
        self._started = True
        self._writer.open()
        self._worker = threading.Thread(target=self._drain, name="tidemark-monitor", daemon=True)
        self._worker.start()
        self.registry.begin()
        self._publisher.start()
        if listen:
            self._listener = json_listener(self.handle_event)
            self.spark.streams.addListener(self._listener)
        self._watchdog.start()

    def attach(self, query: StreamingQuery) -> None:
        """Watch this query: events of other queries are ignored from now on, and 'stop' can stop it."""
        self._query = query
        self._query_id = str(query.id)
        # The clock starts with the query: starting it (listing sources, planning) is not a stuck batch.
        self._watchdog.note_activity()
        self.registry.add_query(self._query_name())  # counters start at 0, so rate() sees the first batch
        self._publisher.changed()

    def record(self, type: str, **data: Any) -> None:
        """Append an extra line (e.g. a warning) to the run's log, in order with the listener's lines."""
        if self._started and not self._stopped:
            self._queue.put((type, datetime.now(UTC), data))
        else:
            log.debug("monitor not running; dropped %s line", type)

    def stop(self, ended: str | None = None) -> None:
        """Flush the log, stop the threads, push the final metrics, unregister the listener; safe to call twice.

        ended is how the caller's run ended (a StopReason value); the final state says 'failed' instead when the
        query failed or never started, and 'stuck' when the watchdog stopped it.
        """
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._watchdog.stop()
        query = self._query
        if query is not None and not self._query_active(query):
            # The terminated event trails the query's end on the listener bus; give it a moment.
            self._terminated.wait(_TERMINATED_GRACE_SECONDS)
        if self._listener is not None:
            try:
                self.spark.streams.removeListener(self._listener)
            except Exception as exc:  # the session may already be stopped
                log.debug("could not remove the monitor listener: %s", exc)
        self._queue.put(None)
        if self._worker is not None:
            self._worker.join(timeout=30)
        if query is not None and not self._terminated.is_set() and not self._query_active(query):
            self._write(EventType.TERMINATED, datetime.now(UTC), self._terminated_data(query))
        self._writer.close()
        self.registry.finish(self._final_state(ended))
        self._publisher.stop()

    # --- writer thread -------------------------------------------------------------------------------------

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._handle(*item)
            except Exception:  # one bad event must not end the log
                log.exception("the progress monitor could not record a %s event", item[0])

    def _handle(self, kind: str, moment: datetime, payload: Any) -> None:
        if kind == EventType.PROGRESS:
            data = payload
            if not self._is_ours(str(data.get("id", ""))):
                return
            progress = BatchProgress.from_json(data)
            line: dict[str, Any] = {"progress": data}
            if progress.source_lag:
                line["source_lag"] = {str(lag.partition): lag.lag for lag in progress.source_lag}
            if self.rocksdb_cap_bytes is not None:
                line[ROCKSDB_CAP_FIELD] = self.rocksdb_cap_bytes
            self._write(EventType.PROGRESS, moment, line)
            with self._state_lock:
                self._recent.append(progress)
            crawl = self.crawl_watch.observe(progress, self.rocksdb_cap_bytes)
            self.registry.update(progress, rocksdb_cap_bytes=self.rocksdb_cap_bytes, crawl=crawl is not None)
            self._publisher.changed()
            if crawl is not None:
                self.warn(crawl.code, crawl.message, crawl.fix, moment)
            self._watchdog.note_activity()
            self._idle_logged = False
            return
        if kind in (EventType.STARTED, EventType.IDLE, EventType.TERMINATED):
            if not self._is_ours(str(payload.get("query_id", ""))):
                return
            if kind == EventType.STARTED:
                payload = {**payload, "pipeline": self.config.pipeline.name, "checkpoint": self._location}
                payload["stuck_after_seconds"] = self.stuck_after.total_seconds()
                # analyze, report and plan show an uncounted numRowsTotal as "not tracked", never as 0.
                payload["state_rows_tracked"] = self.rows_tracked
                payload["metrics_url"] = self._publisher.url
                if self.start_record is not None:
                    payload["state_store"] = self.start_record
            if kind == EventType.TERMINATED:
                self._terminated.set()
            elif kind == EventType.IDLE:
                # Not for STARTED: on a busy driver it can arrive after the watchdog fired, and must not re-arm it.
                self._watchdog.note_activity()
                self.registry.note_idle(self._query_name())
                self._publisher.changed()
            if kind == EventType.IDLE:
                # Spark repeats the idle event every few seconds while idle; one line per idle spell is enough.
                if self._idle_logged:
                    return
                self._idle_logged = True
        self._write(kind, moment, payload)

    def _write(self, kind: str, moment: datetime, data: dict[str, Any]) -> None:
        self._writer.write(kind, time=moment, **data)

    def _is_ours(self, query_id: str) -> bool:
        return self._query_id is None or query_id == self._query_id

    # --- watchdog ------------------------------------------------------------------------------------------

    @property
    def _location(self) -> str:
        return self.config.checkpoint.location

    @staticmethod
    def _query_active(query: StreamingQuery) -> bool:
        try:
            return bool(query.isActive)
        except Exception:
            return False

    def _is_busy(self) -> bool:
        query = self._query
        if query is None:
            return False
        if not self._query_active(query):
            return False
        # Waiting for the next trigger is not being stuck; only a running trigger can hang.
        return bool(query.status.get("isTriggerActive", True))

    def _terminated_data(self, query: StreamingQuery) -> dict[str, Any]:
        try:
            failure = query.exception()
        except Exception:
            failure = None
        return {
            "query_id": str(query.id),
            "query_run_id": str(query.runId),
            "exception": str(failure) if failure is not None else None,
            "note": "written by the monitor: the listener's terminated event did not arrive",
        }

    def _running_stages(self) -> tuple[RunningStage, ...]:
        from tidemark.connect import is_connect

        if is_connect(self.spark):  # Spark's status tracker lives in the driver's JVM: a Connect client has none
            return ()
        tracker = self.spark.sparkContext.statusTracker()
        stage_ids: set[int] = set()
        query = self._query
        if query is not None:
            # Spark runs every job of a streaming query in a job group named by the query's run id.
            for job_id in tracker.getJobIdsForGroup(str(query.runId)):
                job = tracker.getJobInfo(job_id)
                if job is not None and str(job.status) == "RUNNING":
                    stage_ids.update(job.stageIds)
        active = set(tracker.getActiveStageIds())
        chosen = sorted(stage_ids & active) if stage_ids else sorted(active)
        stages = []
        for stage_id in chosen:
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                stages.append(
                    RunningStage(
                        stage_id=int(info.stageId),
                        name=str(info.name),
                        num_tasks=int(info.numTasks),
                        active_tasks=int(info.numActiveTasks),
                        completed_tasks=int(info.numCompletedTasks),
                        failed_tasks=int(info.numFailedTasks),
                    )
                )
        return tuple(stages)

    def diagnose(self, waited: float) -> StuckDiagnosis:
        """What is running now, the recent commit times and the checkpoint's file counts."""
        with self._state_lock:
            recent = tuple(self._recent)
        last_done = recent[-1].batch_id if recent else None
        planned = latest_planned_batch(self._location)
        batch_id = planned if planned is not None and (last_done is None or planned > last_done) else None
        if batch_id is None:
            batch_id = last_done + 1 if last_done is not None else planned
        status: dict[str, Any] = {}
        stages: tuple[RunningStage, ...] = ()
        if self._query is not None:
            try:
                status = dict(self._query.status)
            except Exception as exc:
                log.debug("no query status: %s", exc)
        try:
            stages = self._running_stages()
        except Exception as exc:
            log.debug("no stage information: %s", exc)
        return StuckDiagnosis(
            batch_id=batch_id,
            last_completed_batch=last_done,
            waiting_seconds=round(waited, 3),
            stuck_after_seconds=self.stuck_after.total_seconds(),
            action=self.config.monitor.on_stuck,
            query_status=status,
            running_stages=stages,
            recent_batches=recent_commits(recent[-5:]),
            checkpoint_files=checkpoint_file_counts(self._location),
        )

    def _on_stuck(self, waited: float) -> None:
        diagnosis = self.diagnose(waited)
        self.diagnoses.append(diagnosis)
        self.registry.set_stuck(self._query_name(), True)
        self._publisher.changed()
        log.warning("stuck: %s", diagnosis.message())
        self._queue.put((EventType.STUCK, datetime.now(UTC), {**asdict(diagnosis), "message": diagnosis.message()}))
        if diagnosis.action == "stop" and self._query is not None:
            query = self._query
            self._watchdog.disarm()
            threading.Thread(target=self._stop_query, args=(query,), name="tidemark-stop", daemon=True).start()

    def _query_name(self) -> str:
        name = self.config.pipeline.name
        if self._query is not None:
            try:
                name = self._query.name or name
            except Exception as exc:
                log.debug("no query name: %s", exc)
        return name

    def _warn(self, text: str) -> None:
        log.warning(text)
        self.record("warning", code="METRICS", message=text)

    def warn(self, code: str, message: str, fix: str, moment: datetime | None = None) -> None:
        """A finding of the run itself (from the monitor's thread): the log, the progress log, the run's warnings."""
        text = f"{code}: {message}; fix: {fix}"
        log.warning(text)
        self._write(EventType.WARNING, moment or datetime.now(UTC), {"code": code, "message": message, "fix": fix})
        if self._on_warning is not None:
            self._on_warning(text)

    def _final_state(self, ended: str | None) -> RunState:
        query = self._query
        if query is None:
            return RunState.REQUESTED if ended is None else RunState.FAILED  # the run's query never started
        try:
            failure = query.exception()
        except Exception:
            failure = None
        if failure is not None:
            return RunState.FAILED
        if any(d.action == "stop" for d in self.diagnoses):
            return RunState.STUCK
        try:
            return RunState(ended) if ended is not None else RunState.REQUESTED
        except ValueError:
            log.debug("unknown end of run %r", ended)
            return RunState.REQUESTED

    @staticmethod
    def _stop_query(query: StreamingQuery) -> None:
        started = time.monotonic()
        try:
            query.stop()
        except Exception as exc:
            log.warning("could not stop the stuck query: %s", exc)
        log.debug("stopped the stuck query in %.1fs", time.monotonic() - started)
