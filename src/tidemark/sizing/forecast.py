"""From measured state to a forecast: the executor's break point and when the state's growth reaches it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tidemark.config.model import StateStoreKind
from tidemark.config.rocksdb import UNTRACKED_HINT
from tidemark.errors import InputError, UsageError
from tidemark.sizing.breaking import BreakPoint, break_point
from tidemark.sizing.measured import MeasuredState
from tidemark.sizing.memory import MemoryConf
from tidemark.sizing.resident import DEFAULT_RETAINED_VERSIONS, RowShape, Workload
from tidemark.sizing.trend import DEFAULT_WINDOW, Growth, Outlook, growth_of, outlook


@dataclass(frozen=True)
class Forecast:
    """The break point of one executor, the growth it was projected from, and the outlook."""

    break_point: BreakPoint
    growth: Growth
    outlook: Outlook
    series_from: str
    shape_from: str


def _shape(measured: list[MeasuredState], store: StateStoreKind) -> RowShape:
    # Sizes read from a checkpoint beat the SizeEstimator figures of a progress log.
    shapes = [m.shape for m in measured if m.shape is not None]
    shapes.sort(key=lambda s: 0 if s.origin.startswith("checkpoint") else 1)
    if shapes:
        return shapes[0]
    if store is StateStoreKind.ROCKSDB:
        # RocksDB's log has no row sizes; unbounded memtables are then taken as full (the upper bound).
        return RowShape(0.0, 0.0, origin="unknown (RocksDB progress log)")
    msg = (
        "the progress log has no stateOnCurrentVersionSizeBytes to size the state's rows: "
        "also give --from-checkpoint PATH (the query's checkpoint) to read them"
    )
    raise UsageError(msg)


def forecast(
    conf: MemoryConf,
    measured: list[MeasuredState],
    window: int = DEFAULT_WINDOW,
    container_bytes: int | None = None,
) -> Forecast:
    """Read the growth from the longest series, size rows from the best source, and find the break."""
    if not measured:
        msg = "give --from-log or --from-checkpoint to forecast the break"
        raise UsageError(msg)
    counted = [m for m in measured if m.rows_tracked]
    if not counted:
        msg = (
            f"{measured[0].source}: the state rows are {UNTRACKED_HINT}; give --from-checkpoint PATH (the query's "
            "checkpoint) so the rows are counted there"
        )
        raise InputError(msg)
    series = max(counted, key=lambda m: len(m.points))
    growth = growth_of(series.points, window)
    shape = _shape(measured, conf.state_store)
    n = conf.executors
    instances = next((m.state_instances for m in measured if m.state_instances), None) or 1
    retained = next((m.retained_versions for m in measured if m.retained_versions), None)
    workload = Workload(
        keys=growth.keys_now / n,
        batch_rows=growth.input_rows_per_batch / n,
        updated_per_batch=growth.updated_per_batch / n,
        state_instances=math.ceil(instances / n),
    )
    point = break_point(
        conf,
        shape,
        workload,
        retained_versions=retained or DEFAULT_RETAINED_VERSIONS,
        container_bytes=container_bytes,
        row_sizes_known=shape.data_bytes > 0,
    )
    return Forecast(
        break_point=point,
        growth=growth,
        outlook=outlook(growth, point),
        series_from=series.source,
        shape_from=shape.origin,
    )
