"""The no-data batch a stopped query owed, planned so a restart runs it.

After a batch that moves the watermark, Spark runs one more batch with no new data to emit the windows the new
watermark closes and evict their state (a "no-data batch"). Spark decides that from the previous batch's executed
plan, which a restarted query does not have: a query stopped (killed, crashed, or failed after its commit on
Spark 4.1's Kafka defect) between the two resumes without it, and until new data arrives the closed windows are
neither written nor evicted; an available-now run ends without them. tidemark plans that batch itself before the
query starts: offsets/<n+1> is the committed offsets/<n> with the watermark commits/<n> recorded for the next batch,
which is what Spark writes for a no-data batch. Spark then runs it as a planned batch, exactly once.

A restart can also commit a watermark that is too old: a batch re-run after its sink already logged it is skipped
by the file sink without executing its plan, so Spark sees none of its event times and commits the watermark the
batch started with. When the newest batch read data and did not move the watermark, its input is read again (one
batch, as the quarantine's re-read does) and the watermark Spark would have computed (newest valid event time minus
the delay, never backwards) is the one the owed batch runs with. The caller passes the newest event time Spark
reported for a batch it executed (progress `eventTime.max`: pipeline/run.py), so only a batch whose plan did not run
is read again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tidemark.errors import CheckpointError
from tidemark.formats import Checkpoint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OwedBatch:
    """The no-data batch planned for a restart."""

    batch: int  # the batch planned (offsets/<batch> written)
    after: int  # the committed batch whose watermark it applies
    watermark_ms: int  # the watermark it runs with
    previous_watermark_ms: int  # the watermark batch <after> ran with
    recomputed: bool  # commits/<after> recorded a watermark that was too old (a re-run the sink skipped)


# The newest valid event time (epoch ms) a committed batch read, from its input read again; None when unknown.
NewestEvent = Callable[[int], "int | None"]


def plan_owed_batch(
    checkpoint: Checkpoint,
    delay_ms: int,
    newest_event_ms: NewestEvent | None = None,
    now_ms: int | None = None,
) -> OwedBatch | None:
    """Write offsets/<n+1> when the newest batch n committed and the watermark it leaves is past the one it ran
    with; else None.

    Nothing is written when the newest planned batch is not committed (Spark re-runs it itself), when the
    watermark did not move, when the entry cannot be read as Spark's, or when another writer planned the batch
    first (the write is exclusive).
    """
    planned = checkpoint.offset_batches()
    if not planned:
        return None
    latest = planned[-1]
    commit = checkpoint.find_commit(latest)
    entry = checkpoint.find_offset(latest)
    if commit is None or entry is None or not entry.has_metadata:
        return None
    watermark = commit.next_watermark_ms
    recomputed = False
    if watermark <= entry.watermark_ms and newest_event_ms is not None and _read_data(checkpoint, latest):
        newest = newest_event_ms(latest)
        if newest is not None and newest - delay_ms > watermark:
            watermark, recomputed = newest - delay_ms, True
    if watermark <= entry.watermark_ms:
        return None
    try:
        if not checkpoint.plan_no_data_batch(latest, watermark, now_ms or int(time.time() * 1000)):
            return None
    except CheckpointError as exc:
        log.warning("the batch offsets/%d owes could not be planned (%s); Spark will not run it", latest, exc)
        return None
    return OwedBatch(
        batch=latest + 1,
        after=latest,
        watermark_ms=watermark,
        previous_watermark_ms=entry.watermark_ms,
        recomputed=recomputed,
    )


def _read_data(checkpoint: Checkpoint, batch: int) -> bool:
    """True when the batch's source offsets differ from the batch before's (it read something). False when the
    batch before's entry is gone: what the batch read is then unknown, and is not read from the source's start."""
    if batch == 0:
        return True
    entry, before = checkpoint.find_offset(batch), checkpoint.find_offset(batch - 1)
    return entry is not None and before is not None and entry.source_offsets != before.source_offsets


def plan_owed_batch_at(location: str, delay_ms: int, newest_event_ms: NewestEvent | None = None) -> OwedBatch | None:
    """plan_owed_batch for the checkpoint at a path or URI; None (logged) when it cannot be read."""
    try:
        return plan_owed_batch(Checkpoint.open(location), delay_ms, newest_event_ms)
    except CheckpointError as exc:
        log.warning("could not look for the batch the last run owed: %s", exc)
        return None
