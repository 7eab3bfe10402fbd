"""The run's own listener: keeps the run's counters and the malformed-row count of each batch.

It never runs Spark jobs (it is on Spark's listener thread): the run's main loop writes each committed
batch's malformed records (pipeline/reconcile.py) from the counts kept here, and from the records themselves
when the observation carried them (a Kafka source on a session with tidemark's JVM helper). The records are taken
out of the progress event before any hook sees it: the progress log, Prometheus and the report get the count.
It also keeps the newest event time Spark saw in each batch it executed (`eventTime.max`), so the run need not read
a batch's input again to learn it (pipeline/owed_batch.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidemark.monitor.events import EventKind
from tidemark.pipeline.quarantine import OBSERVATION, RECORDS, inline_records, rows_of

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
    # batch -> malformed rows the stream counted (-1: the event carried no count, or the batch's plan did not run),
    # until they are written
    malformed: dict[int, int] = field(default_factory=dict)
    # batch -> its malformed records, when its observation carried every one of them
    records: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    last_progress: dict[str, Any] | None = None
    hook_errors: list[str] = field(default_factory=list)
    hooked_batch: int | None = None  # the newest batch whose hooks (the sink's ledger, the caller's) have all run
    # batch -> the newest event time (epoch ms) Spark's watermark operator saw in it, for batches whose plan ran
    newest_event_ms: dict[int, int] = field(default_factory=dict)


def batch_max_event_ms(progress: dict[str, Any]) -> int | None:
    """A progress event's `eventTime.max` in epoch ms: present only when the batch's plan ran and rows reached the
    watermark operator (a batch the sink skipped, or one with no rows, has none)."""
    value = (progress.get("eventTime") or {}).get("max")
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return round(moment.timestamp() * 1000) if moment.tzinfo is not None else None


def plan_skipped(progress: dict[str, Any]) -> bool:
    """True when a batch with new input reports no input row: most likely its plan did not run. Spark's file sink
    skips a batch its log has (written before a stop, not committed) without running the plan, whose metrics are
    then zero values, its malformed-row count included. (tidemark's Delta and Iceberg writers run such a batch
    through Spark's no-op sink, so their plans run.) The other case, input files with no line, is rare and cheap
    to read again."""
    if int(progress.get("numInputRows") or 0) != 0:
        return False
    return any(source.get("startOffset") != source.get("endOffset") for source in progress.get("sources") or [])


def make_handler(
    query_name: str,
    hooks: list[ProgressHook],
) -> tuple[Callable[[EventKind, dict[str, Any]], None], RunCounters, threading.Lock]:
    """The run's handler of listener-bus events (their JSON) for one named query."""
    counters = RunCounters()
    lock = threading.Lock()

    def handle(kind: EventKind, event: dict[str, Any]) -> None:
        if kind is not EventKind.PROGRESS:
            return
        progress = event.get("progress") or {}
        if progress.get("name") != query_name:
            return
        batch_id = int(progress["batchId"])
        observed = progress.get("observedMetrics") or {}
        count, _sample = rows_of(observed)
        records = inline_records(observed)
        mine = observed.get(OBSERVATION)
        if isinstance(mine, dict):
            mine.pop(RECORDS, None)
        known = OBSERVATION in observed and not plan_skipped(progress)
        with lock:
            # No count is not a count of 0 (nor is a skipped plan's): that batch is re-read rather than taken for clean.
            counters.malformed[batch_id] = count if known else -1
            if records is not None and known:
                counters.records[batch_id] = records
            counters.batches += 1
            counters.first_batch = batch_id if counters.first_batch is None else counters.first_batch
            counters.last_batch = batch_id
            counters.input_rows += int(progress.get("numInputRows", 0))
            counters.quarantined += count
            counters.last_progress = progress
            newest = batch_max_event_ms(progress)
            if newest is not None:
                counters.newest_event_ms[batch_id] = newest
        for hook in hooks:
            try:
                hook(progress)
            except Exception as exc:  # a reporting hook must never take the query down
                log.warning("progress hook failed: %s", exc)
                counters.hook_errors.append(str(exc))
        with lock:
            counters.hooked_batch = batch_id

    return handle, counters, lock
