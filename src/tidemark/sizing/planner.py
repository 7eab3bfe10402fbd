"""The two entry points the CLI calls: a memory plan and checkpoint-mode advice, from whatever inputs were given."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from tidemark.config import load_config
from tidemark.config.model import StateStoreKind, TidemarkConfig
from tidemark.errors import InputError
from tidemark.formats import read_progress
from tidemark.sizing.advice import CheckpointAdvice, advise_checkpoint, detect_changelog
from tidemark.sizing.forecast import forecast
from tidemark.sizing.load import (
    ConfOverrides,
    LoadFlags,
    detect_state_store,
    load_from_progress,
    load_from_rest,
    resolve_conf,
    resolve_load,
    spark_memory,
)
from tidemark.sizing.measured import MeasuredState, measured_from_checkpoint, measured_from_progress
from tidemark.sizing.memory import DEFAULT_TARGET_UTILIZATION, MemoryPlan, Verdict, plan_memory
from tidemark.sizing.trend import DEFAULT_WINDOW


@dataclass(frozen=True)
class MemoryRequest:
    """Everything `tidemark plan memory` was given."""

    config: str | Path | None = None
    overrides: ConfOverrides = field(default_factory=ConfOverrides)
    load: LoadFlags = field(default_factory=LoadFlags)
    from_log: str | Path | None = None
    from_rest: str | None = None
    scale: float | None = None
    target: float = DEFAULT_TARGET_UTILIZATION
    from_checkpoint: str | Path | None = None
    container_memory: str | None = None
    growth_window: int = DEFAULT_WINDOW
    batch: int | None = None  # the checkpoint's batch to read (default: its latest committed)


def checkpoint_of_log(log: str | Path) -> str | None:
    """The checkpoint a progress log's runs name (their started lines), when it is still there."""
    from tidemark.formats import Checkpoint, EventType, iter_log

    for event in iter_log(log):
        if event.type == EventType.STARTED and event.data.get("checkpoint"):
            path = str(event.data["checkpoint"])
            return path if Checkpoint.open(path).exists() else None
    return None


def _config(path: str | Path | None) -> TidemarkConfig | None:
    return load_config(path) if path is not None else None


def plan_memory_request(request: MemoryRequest) -> MemoryPlan:
    """Resolve the conf and the load, plan, and forecast the break from measured state when there is some.

    The state store seen in the log or checkpoint wins over Spark's default (not over a config or a flag).
    """
    config = _config(request.config)
    if config is not None and config.checkpoint.bounded_memory_mb == "auto":
        from tidemark.sizing.store_start import plan_start

        config = plan_start(config).config  # the provider and cap a run of this config would start with
    conf = resolve_conf(config, request.overrides)
    log = None
    measured: list[MeasuredState] = []
    if request.from_log is not None:
        # One read of the log for both: a week-long log is large.
        progress = read_progress(request.from_log)
        log = load_from_progress(progress, request.from_log)
        measured.append(measured_from_progress(progress, str(request.from_log)))
    notes: list[str] = []
    if request.from_checkpoint is not None:
        measured.append(measured_from_checkpoint(request.from_checkpoint, batch=request.batch))
    elif measured and not measured[0].rows_tracked and request.from_log is not None:
        # The log's rows in state were not counted: count them in the run's checkpoint instead, never plan from 0.
        checkpoint = checkpoint_of_log(request.from_log)
        if checkpoint is not None:
            measured.append(measured_from_checkpoint(checkpoint, batch=request.batch))
            notes.append(
                f"the progress log's state rows are not tracked: rows and sizes were read from {checkpoint} "
                "(the checkpoint the log names)"
            )
    rest = load_from_rest(request.from_rest) if request.from_rest is not None else None
    seen = next((m.state_store for m in measured if m.state_store is not None), None)
    if config is None and request.overrides.state_store is None and seen is not None:
        conf = replace(conf, state_store=seen)
    plan = plan_memory(conf, resolve_load(request.load, log, rest), request.scale, request.target)
    if notes:
        plan = replace(plan, notes=(*plan.notes, *notes))
    if not measured:
        return plan
    container = spark_memory(request.container_memory) if request.container_memory is not None else None
    ahead = forecast(conf, measured, request.growth_window, container)
    point = ahead.break_point
    if not point.fits:
        # One answer: an executor that does not fit its memory now is over, whatever its execution memory's share.
        note = (
            f"verdict over: one executor needs {point.peak_bytes_now / 2**20:,.0f} MB of its "
            f"{point.limit_bytes / 2**20:,.0f} MB {point.limit.value} now (execution memory alone would be "
            f"{plan.verdict.value}); the recommendation's heap and memoryOverhead fit it"
        )
        plan = replace(plan, verdict=Verdict.OVER, notes=(*plan.notes, note))
    return replace(plan, forecast=ahead)


def advise_checkpoint_log(
    log: str | Path,
    config: str | Path | None = None,
    overrides: ConfOverrides | None = None,
) -> CheckpointAdvice:
    """Read a progress log and advise on the checkpoint mode; config and flags give the executor size and slots."""
    overrides = overrides or ConfOverrides()
    loaded = _config(config)
    conf = resolve_conf(loaded, overrides)
    progress = read_progress(log)
    if not any(p.state_operators for p in progress):
        msg = f"{log} holds no progress of a stateful query: give the progress log of a run with state"
        raise InputError(msg)
    store = overrides.state_store or detect_state_store(progress)
    if store is None and loaded is not None:
        store = loaded.checkpoint.state_store
    changelog = detect_changelog(progress)
    if changelog is None and loaded is not None and store is StateStoreKind.ROCKSDB:
        changelog = loaded.checkpoint.changelog
    slots = conf.executors * conf.cores if (loaded is not None or overrides.cores or overrides.executors) else None
    return advise_checkpoint(progress, str(log), conf, store, changelog, slots)
