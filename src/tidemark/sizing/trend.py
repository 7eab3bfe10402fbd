"""The state's growth over recent batches, and when that growth reaches the break point."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tidemark.errors import UsageError
from tidemark.sizing.breaking import BreakPoint, MemoryLimit

# The growth is read over this many most recent batches: long enough to smooth batch-to-batch noise, short
# enough to follow a change of traffic.
DEFAULT_WINDOW = 50


@dataclass(frozen=True)
class StatePoint:
    """The state after one batch, summed over the query's stateful operators."""

    batch_id: int
    rows: int
    timestamp: datetime | None = None
    input_rows: int = 0
    updated_rows: int = 0
    memory_used_bytes: int = 0


@dataclass(frozen=True)
class Growth:
    """How fast the state grows: the least-squares slope of rows over batch ids in the window."""

    batches: int
    first_batch: int
    last_batch: int
    keys_now: int
    keys_per_batch: float
    seconds_per_batch: float | None
    input_rows_per_batch: float
    updated_per_batch: float


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def growth_of(points: Sequence[StatePoint], window: int = DEFAULT_WINDOW) -> Growth:
    """Rows per batch (slope), seconds per batch (median gap of timestamps), batch size and updates (medians).

    Updates are the rows a batch rewrote that already existed: numRowsUpdated minus the new keys.
    """
    if not points:
        msg = "no batch with state to read the growth from"
        raise UsageError(msg)
    if window < 2:
        msg = f"the growth window must hold at least 2 batches, not {window}"
        raise UsageError(msg)
    ordered = sorted(points, key=lambda p: p.batch_id)[-window:]
    slope = _slope([p.batch_id for p in ordered], [p.rows for p in ordered]) if len(ordered) > 1 else 0.0
    gaps: list[float] = []
    updates: list[float] = []
    for before, after in itertools.pairwise(ordered):
        step = after.batch_id - before.batch_id
        if before.timestamp is not None and after.timestamp is not None and step > 0:
            gaps.append((after.timestamp - before.timestamp).total_seconds() / step)
        updates.append(max(0, after.updated_rows - max(0, after.rows - before.rows)))
    return Growth(
        batches=len(ordered),
        first_batch=ordered[0].batch_id,
        last_batch=ordered[-1].batch_id,
        keys_now=ordered[-1].rows,
        keys_per_batch=slope,
        seconds_per_batch=statistics.median(gaps) if gaps else None,
        input_rows_per_batch=statistics.median(p.input_rows for p in ordered),
        updated_per_batch=statistics.median(updates) if updates else 0.0,
    )


@dataclass(frozen=True)
class Outlook:
    """When the growth reaches the break: batches and time left, and the sentence that says it."""

    keys_now: int
    keys_per_batch: float
    seconds_per_batch: float | None
    cluster_keys_at_break: float | None
    batches_left: float | None
    time_left: timedelta | None
    summary: str


def count_text(value: float) -> str:
    """'850', '12 k', '1.2 M' (one decimal under ten, whole numbers above)."""
    size = abs(value)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if size >= scale:
            scaled = value / scale
            return f"{scaled:.1f} {unit}" if abs(scaled) < 10 else f"{scaled:.0f} {unit}"
    return f"{value:.0f}"


def duration_text(value: timedelta) -> str:
    """'45 s', '12 min', '2 h 10 min', '3 d 4 h'."""
    seconds = round(value.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def outlook(growth: Growth, point: BreakPoint) -> Outlook:
    """Project the break from the trend: at K keys per batch, how many batches (and how long) until it."""
    who = "this executor" if point.executors == 1 else f"each of the {point.executors} executors"
    memory = "heap" if point.limit is MemoryLimit.HEAP else "container memory"
    limit_keys = point.cluster_keys_at_break
    batches_left: float | None = None
    time_left: timedelta | None = None
    rate = f"{count_text(growth.keys_per_batch)} keys per batch"
    if not point.fits:
        summary = (
            f"{who} does not fit its {memory} before the state grows: it needs "
            f"{point.peak_bytes_now / 2**20:,.0f} MB of {point.limit_bytes / 2**20:,.0f} MB; {point.advice}"
        )
        batches_left = 0.0
        time_left = timedelta(0)
    elif limit_keys is None:
        summary = (
            f"{who} does not run out of {memory} as keys grow (RocksDB keeps state beyond its bounded memory on "
            f"disk); at {count_text(growth.keys_now)} keys it needs {point.peak_bytes_now / 2**20:,.0f} MB of the "
            f"{point.limit_bytes / 2**20:,.0f} MB container"
        )
    elif growth.keys_now >= limit_keys:
        summary = (
            f"the state ({count_text(growth.keys_now)} keys) is already past the break at "
            f"{count_text(limit_keys)} keys: expect {who} to run out of {memory}"
        )
        batches_left = 0.0
        time_left = timedelta(0)
    elif growth.keys_per_batch <= 0:
        summary = (
            f"the state does not grow ({rate}): {count_text(growth.keys_now)} keys, "
            f"{growth.keys_now / limit_keys:.0%} of the {count_text(limit_keys)} keys at which {who} runs out "
            f"of {memory}"
        )
    else:
        batches_left = (limit_keys - growth.keys_now) / growth.keys_per_batch
        when = f"about {count_text(math.ceil(batches_left))} batches"
        if growth.seconds_per_batch is not None:
            time_left = timedelta(seconds=batches_left * growth.seconds_per_batch)
            when += f" ({duration_text(time_left)})"
        summary = (
            f"at the current growth of {rate} {who} runs out of {memory} in {when}, at {count_text(limit_keys)} keys"
        )
    return Outlook(
        keys_now=growth.keys_now,
        keys_per_batch=growth.keys_per_batch,
        seconds_per_batch=growth.seconds_per_batch,
        cluster_keys_at_break=limit_keys,
        batches_left=batches_left,
        time_left=time_left,
        summary=summary,
    )
