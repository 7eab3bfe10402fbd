"""The run's own listener: writes quarantined records per batch and keeps the run's counters."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidemark.pipeline.quarantine import rows_of, write_batch, write_marker

if TYPE_CHECKING:
    from pyspark.sql.streaming.listener import QueryProgressEvent

log = logging.getLogger(__name__)

ProgressHook = Callable[[dict[str, Any]], None]


@dataclass
class RunCounters:
    """What the run has seen so far (updated from the listener thread, read under the lock)."""

    batches: int = 0
    first_batch: int | None = None
    last_batch: int | None = None
    input_rows: int = 0
    quarantined: int = 0
    last_progress: dict[str, Any] | None = None
    hook_errors: list[str] = field(default_factory=list)


def make_listener(
    query_name: str,
    quarantine_dir: str | None,
    hooks: list[ProgressHook],
) -> tuple[Any, RunCounters, threading.Lock]:
    """A StreamingQueryListener for one named query (the session may run others)."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    counters = RunCounters()
    lock = threading.Lock()

    class _PipelineListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: QueryProgressEvent) -> None:
            progress = event.progress
            if progress.name != query_name:
                return
            data = json.loads(progress.json)
            count, rows = rows_of(progress.observedMetrics)
            if quarantine_dir is not None:
                write_batch(quarantine_dir, progress.batchId, rows)
                write_marker(quarantine_dir, progress.batchId)
            with lock:
                counters.batches += 1
                counters.first_batch = progress.batchId if counters.first_batch is None else counters.first_batch
                counters.last_batch = progress.batchId
                counters.input_rows += progress.numInputRows
                counters.quarantined += count
                counters.last_progress = data
            for hook in hooks:
                try:
                    hook(data)
                except Exception as exc:  # a reporting hook must never take the query down
                    log.warning("progress hook failed: %s", exc)
                    counters.hook_errors.append(str(exc))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return _PipelineListener(), counters, lock
