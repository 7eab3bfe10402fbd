"""The stuck-batch watchdog: fires when no batch completes within stuck_after, with a diagnosis."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tidemark.errors import TidemarkError
from tidemark.formats import BatchProgress, Checkpoint

log = logging.getLogger(__name__)

MIN_DEFAULT_STUCK_AFTER = timedelta(minutes=5)


def default_stuck_after(trigger_interval: timedelta, configured: timedelta | None = None) -> timedelta:
    """The configured limit, or 10x the trigger interval but at least 5 minutes."""
    if configured is not None:
        return configured
    return max(trigger_interval * 10, MIN_DEFAULT_STUCK_AFTER)


@dataclass(frozen=True)
class RunningStage:
    """A Spark stage that was running when the watchdog fired."""

    stage_id: int
    name: str
    num_tasks: int
    active_tasks: int
    completed_tasks: int
    failed_tasks: int


@dataclass(frozen=True)
class BatchCommit:
    """State commit figures of one recent completed batch."""

    batch_id: int
    batch_duration_ms: int
    commit_time_ms: Mapping[str, int]


@dataclass(frozen=True)
class StuckDiagnosis:
    """What the watchdog found when no batch completed in time."""

    batch_id: int | None
    last_completed_batch: int | None
    waiting_seconds: float
    stuck_after_seconds: float
    action: str
    query_status: Mapping[str, Any] = field(default_factory=dict)
    running_stages: tuple[RunningStage, ...] = ()
    recent_batches: tuple[BatchCommit, ...] = ()
    checkpoint_files: Mapping[str, int] = field(default_factory=dict)

    def message(self) -> str:
        """A one-paragraph, human description for the console."""
        batch = f"batch {self.batch_id}" if self.batch_id is not None else "the first batch"
        parts = [
            f"{batch} has not completed for {self.waiting_seconds:.0f}s (stuck_after {self.stuck_after_seconds:.0f}s)"
        ]
        if self.running_stages:
            stages = ", ".join(
                f"stage {s.stage_id} '{s.name}' {s.active_tasks} running/{s.completed_tasks} done of {s.num_tasks}"
                for s in self.running_stages
            )
            parts.append(f"running: {stages}")
        else:
            parts.append("no Spark stage is running (the driver may be stuck outside a job, e.g. in a commit)")
        if self.recent_batches:
            commits = ", ".join(
                f"batch {b.batch_id}: {sum(b.commit_time_ms.values())} ms" for b in self.recent_batches[-3:]
            )
            parts.append(f"recent state commit times (summed over tasks): {commits}")
        if self.checkpoint_files:
            files = ", ".join(f"{k} {v}" for k, v in self.checkpoint_files.items())
            parts.append(f"checkpoint files: {files}")
        parts.append("the query is being stopped" if self.action == "stop" else "the query keeps running")
        return "; ".join(parts)


def checkpoint_file_counts(location: str) -> dict[str, int]:
    """Data files (not .crc) under each part of a checkpoint, counting at most 200,000 per part."""
    try:
        return Checkpoint.open(location).file_counts()
    except TidemarkError as exc:
        log.debug("no file counts for %s: %s", location, exc)
        return {}


def latest_planned_batch(location: str) -> int | None:
    """The highest batch with an offsets file (planned, maybe not committed)."""
    try:
        ids = Checkpoint.open(location).offset_batches()
    except TidemarkError as exc:
        log.debug("no planned batch for %s: %s", location, exc)
        return None
    return ids[-1] if ids else None


def recent_commits(progress: Iterable[BatchProgress]) -> tuple[BatchCommit, ...]:
    """Commit time per operator of the given batches."""
    return tuple(
        BatchCommit(
            batch_id=p.batch_id,
            batch_duration_ms=p.batch_duration_ms,
            commit_time_ms={f"{i}:{op.operator_name}": op.commit_time_ms for i, op in enumerate(p.state_operators)},
        )
        for p in progress
    )


class Watchdog:
    """A daemon thread that calls `on_stuck` once per episode of no batch completing within the limit."""

    def __init__(
        self,
        stuck_after: timedelta,
        on_stuck: Callable[[float], None],
        is_busy: Callable[[], bool] = lambda: True,
        check_every: float | None = None,
    ) -> None:
        self.stuck_after = stuck_after
        self._on_stuck = on_stuck
        self._is_busy = is_busy
        limit = stuck_after.total_seconds()
        self._check_every = check_every if check_every is not None else min(max(limit / 10, 0.2), 10.0)
        self._last_activity = time.monotonic()
        self._armed = True
        self._disarmed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired = 0

    def note_activity(self) -> None:
        """A batch completed (or the query reported itself idle): restart the clock and re-arm."""
        self._last_activity = time.monotonic()
        self._armed = not self._disarmed

    def disarm(self) -> None:
        """Never fire again (the query is being stopped)."""
        self._disarmed = True
        self._armed = False

    def start(self) -> None:
        """Start watching from now."""
        self.note_activity()
        self._thread = threading.Thread(target=self._run, name="tidemark-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching; safe to call twice."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

    def check(self) -> bool:
        """Fire if the limit passed while the query is busy; return whether it fired."""
        waited = time.monotonic() - self._last_activity
        if not self._armed or waited < self.stuck_after.total_seconds():
            return False
        try:
            busy = self._is_busy()
        except Exception as exc:  # the query may be gone; the watchdog must not die with it
            log.debug("watchdog busy check failed: %s", exc)
            busy = False
        if not busy:
            return False
        self._armed = False
        self.fired += 1
        try:
            self._on_stuck(waited)
        except Exception:
            log.exception("the stuck-batch diagnosis failed")
        return True

    def _run(self) -> None:
        while not self._stop.wait(self._check_every):
            self.check()
