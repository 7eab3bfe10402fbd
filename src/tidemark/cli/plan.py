"""CLI commands for plan: `tidemark plan memory` and `tidemark plan checkpoint LOG` (no Spark needed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from tidemark.cli.output import out, print_json

if TYPE_CHECKING:
    from rich.table import Table

    from tidemark.config.model import StateStoreKind
    from tidemark.sizing.advice import CheckpointAdvice
    from tidemark.sizing.forecast import Forecast
    from tidemark.sizing.memory import MemoryPlan, Usage

plan_app = typer.Typer(help="Size executors and pick the state store from measured runs.", no_args_is_help=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", help="Read the Spark conf from a pipeline config.")]
ExecMemOpt = Annotated[str | None, typer.Option("--executor-memory", help="Executor heap, e.g. 4g (default 1g).")]
ExecutorsOpt = Annotated[int | None, typer.Option("--executors", min=1, help="Number of executors (default 1).")]
CoresOpt = Annotated[int | None, typer.Option("--cores", min=1, help="Cores per executor (default 1).")]
StoreOpt = Annotated[str | None, typer.Option("--state-store", help="hdfs or rocksdb (default: config, log, hdfs).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
_VERDICT_STYLE = {"ok": "green", "tight": "yellow", "over": "bold red"}


def _store(value: str | None) -> StateStoreKind | None:
    from tidemark.config.model import StateStoreKind
    from tidemark.errors import UsageError

    if value is None:
        return None
    try:
        return StateStoreKind(value.lower())
    except ValueError as exc:
        msg = f"--state-store must be 'hdfs' or 'rocksdb', not {value!r}"
        raise UsageError(msg) from exc


@plan_app.command("memory")
def memory(
    config: ConfigOpt = None,
    executor_memory: ExecMemOpt = None,
    executors: ExecutorsOpt = None,
    cores: CoresOpt = None,
    memory_fraction: Annotated[float | None, typer.Option("--memory-fraction", help="spark.memory.fraction")] = None,
    storage_fraction: Annotated[
        float | None, typer.Option("--storage-fraction", help="spark.memory.storageFraction")
    ] = None,
    memory_overhead: Annotated[
        str | None, typer.Option("--memory-overhead", help="spark.executor.memoryOverhead")
    ] = None,
    state_store: StoreOpt = None,
    rocksdb_max_memory: Annotated[
        str | None, typer.Option("--rocksdb-max-memory", help="RocksDB bounded memory per executor, e.g. 500m.")
    ] = None,
    state_bytes: Annotated[
        str | None, typer.Option("--state-bytes", help="State memory (memoryUsedBytes summed over operators).")
    ] = None,
    shuffle_bytes: Annotated[
        str | None, typer.Option("--shuffle-bytes", help="Peak shuffle execution memory, whole cluster.")
    ] = None,
    sort_bytes: Annotated[
        str | None, typer.Option("--sort-bytes", help="Peak sort execution memory, whole cluster.")
    ] = None,
    cached_bytes: Annotated[str | None, typer.Option("--cached-bytes", help="Cached (storage) bytes.")] = None,
    from_log: Annotated[
        Path | None, typer.Option("--from-log", help="Take the peak state size from a progress log.")
    ] = None,
    from_rest: Annotated[
        str | None,
        typer.Option("--from-rest", help="Spark UI address or saved /executors JSON: peak execution and cache."),
    ] = None,
    from_checkpoint: Annotated[
        Path | None,
        typer.Option("--from-checkpoint", help="Read state rows and key/value sizes from the query's checkpoint."),
    ] = None,
    batch: Annotated[
        int | None,
        typer.Option("--batch", help="With --from-checkpoint: the committed batch to read (default: the latest)."),
    ] = None,
    container_memory: Annotated[
        str | None,
        typer.Option("--container-memory", help="Container limit per executor (default heap + overhead)."),
    ] = None,
    growth_window: Annotated[
        int, typer.Option("--growth-window", min=2, help="Batches the growth trend is read over.")
    ] = 50,
    scale: Annotated[float | None, typer.Option("--scale", help="Project for K x the event rate.")] = None,
    target: Annotated[float, typer.Option("--target", help="Utilization the recommendation stays under.")] = 0.8,
    as_json: JsonOpt = False,
) -> None:
    """Lay out executor memory, compare it with the load, size the executor, and forecast the break."""
    from tidemark.sizing.load import ConfOverrides, LoadFlags
    from tidemark.sizing.planner import MemoryRequest, plan_memory_request

    request = MemoryRequest(
        config=config,
        overrides=ConfOverrides(
            executor_memory=executor_memory,
            executors=executors,
            cores=cores,
            memory_fraction=memory_fraction,
            storage_fraction=storage_fraction,
            memory_overhead=memory_overhead,
            state_store=_store(state_store),
            rocksdb_max_memory=rocksdb_max_memory,
        ),
        load=LoadFlags(state_bytes, shuffle_bytes, sort_bytes, cached_bytes),
        from_log=from_log,
        from_rest=from_rest,
        scale=scale,
        target=target,
        from_checkpoint=from_checkpoint,
        container_memory=container_memory,
        growth_window=growth_window,
        batch=batch,
    )
    result = plan_memory_request(request)
    if as_json:
        print_json(result)
    else:
        _render_memory(result)


@plan_app.command("checkpoint")
def checkpoint(
    log: Annotated[Path, typer.Argument(help="Progress log file or folder of a run.")],
    config: ConfigOpt = None,
    executor_memory: ExecMemOpt = None,
    executors: ExecutorsOpt = None,
    cores: CoresOpt = None,
    state_store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure the share of batch time spent committing state and advise on the checkpoint mode."""
    from tidemark.sizing.load import ConfOverrides
    from tidemark.sizing.planner import advise_checkpoint_log

    overrides = ConfOverrides(
        executor_memory=executor_memory,
        executors=executors,
        cores=cores,
        state_store=_store(state_store),
    )
    result = advise_checkpoint_log(log, config, overrides)
    if as_json:
        print_json(result)
    else:
        _render_checkpoint(result)


def _mib(value: float) -> str:
    return f"{value / 1024**2:,.1f} MB"


def _usage_rows(table: Table, label: str, usage: Usage) -> None:
    style = _VERDICT_STYLE[usage.verdict.value]
    table.add_row(
        label,
        _mib(usage.execution_without_borrowing_bytes),
        _mib(usage.execution_available_bytes),
        _mib(usage.required_bytes),
        f"{usage.utilization:.0%}",
        f"[{style}]{usage.verdict.value}[/{style}]",
    )


def _render_memory(plan: MemoryPlan) -> None:
    from rich.table import Table

    lay = plan.layout
    regions = Table(title="Executor memory (1 MB = 1024 x 1024 bytes)", show_header=True)
    regions.add_column("region")
    regions.add_column("size", justify="right")
    for name, value in (
        ("heap (spark.executor.memory)", lay.heap_bytes),
        ("reserved", lay.reserved_bytes),
        ("usable = heap - reserved", lay.usable_bytes),
        (f"unified = usable x {plan.conf.memory_fraction}", lay.unified_bytes),
        (f"  storage region (x {plan.conf.storage_fraction})", lay.storage_region_bytes),
        ("  execution region", lay.execution_region_bytes),
        ("user memory", lay.user_bytes),
        ("memory overhead", lay.overhead_bytes),
        ("off-heap", lay.off_heap_bytes),
        ("PySpark worker memory", lay.pyspark_memory_bytes),
        ("RocksDB native (estimate)", lay.rocksdb_native_bytes),
        ("container total", lay.container_bytes),
    ):
        regions.add_row(name, _mib(value))
    out.print(regions)
    usage = Table(title=f"Execution memory, {plan.conf.executors} executor(s), {plan.conf.state_store.value} state")
    for column in ("", "without borrowing", "available", "required", "utilization", "verdict"):
        usage.add_column(column, justify="left" if not column else "right")
    _usage_rows(usage, "per executor", plan.per_executor)
    _usage_rows(usage, "cluster", plan.cluster)
    if plan.projection is not None:
        _usage_rows(usage, f"per executor at {plan.projection.scale:g}x", plan.projection.per_executor)
    out.print(usage)
    style = _VERDICT_STYLE[plan.verdict.value]
    out.print(f"verdict: [{style}]{plan.verdict.value}[/{style}]")
    rec = plan.recommendation
    out.print(
        f"recommendation: spark.executor.memory={rec.executor_memory} ({rec.change}), "
        f"memoryOverhead {_mib(rec.memory_overhead_bytes)}, utilization {rec.utilization_at_recommended:.0%} "
        f"<= target {rec.target_utilization:.0%}"
    )
    if plan.projection is not None:
        proj = plan.projection.recommendation
        out.print(f"at {plan.projection.scale:g}x the event rate: spark.executor.memory={proj.executor_memory}")
    for note in plan.notes:
        out.print(f"[yellow]note:[/yellow] {escape(note)}")
    if plan.forecast is not None:
        _render_forecast(plan.forecast)


def _keys_at_break(fits: bool, keys: float | None) -> str:
    if not fits:
        return "past it now: does not fit"
    return f"{keys:,.0f}" if keys is not None else "none"


def _render_forecast(forecast: Forecast) -> None:
    from rich.table import Table

    point = forecast.break_point
    table = Table(title=f"Break point: one executor's {point.limit.value}, {point.state_store.value} state")
    table.add_column("figure")
    table.add_column("value", justify="right")
    keys_at_break = point.keys_at_break
    rows: list[tuple[str, str]] = [
        (f"{point.limit.value} limit", _mib(point.limit_bytes)),
        ("state rows now (per executor)", f"{point.workload.keys:,.0f}"),
        ("row size: key + value", f"{point.shape.key_bytes:,.0f} + {point.shape.value_bytes:,.0f} B"),
        ("bytes per key at the peak of a batch", f"{point.per_key_bytes:,.0f} B"),
        ("needed now", f"{_mib(point.peak_bytes_now)} ({point.used_share_now:.0%})"),
        ("keys at the break (per executor)", _keys_at_break(point.fits, keys_at_break)),
        ("growth", f"{forecast.growth.keys_per_batch:,.0f} keys per batch"),
    ]
    if forecast.growth.seconds_per_batch is not None:
        rows.append(("batch interval", f"{forecast.growth.seconds_per_batch:,.1f} s"))
    for name, value in rows:
        table.add_row(name, value)
    out.print(table)
    out.print(f"row sizes from {escape(forecast.shape_from)}; growth from {escape(forecast.series_from)}")
    if not point.fits or forecast.outlook.batches_left == 0:
        colour = "bold red"
    elif forecast.outlook.batches_left is None:
        colour = "green"
    else:
        colour = "yellow"
    out.print(f"[{colour}]forecast:[/{colour}] {escape(forecast.outlook.summary)}")


def _render_checkpoint(advice: CheckpointAdvice) -> None:
    from rich.table import Table

    table = Table(title=f"Checkpoint mode: {advice.log}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    store = advice.state_store.value if advice.state_store else "unknown"
    changelog = {True: "on", False: "off", None: "unknown"}[advice.changelog_checkpointing]
    for name, value in (
        ("state store", store),
        ("changelog checkpointing", changelog),
        ("batches analysed", str(advice.batches_analysed)),
        ("mean batch time", f"{advice.mean_batch_ms:.0f} ms"),
        ("mean commit time (wall clock)", f"{advice.mean_commit_ms:.0f} ms"),
        ("commit share of batch time", f"{advice.commit_share:.0%}"),
        ("expected batch time without commit", f"{advice.expected_batch_ms_without_commit:.0f} ms"),
        ("peak state memory", _mib(advice.peak_state_memory_bytes)),
        ("state share of execution memory (on heap)", f"{advice.state_memory_share:.0%}"),
    ):
        table.add_row(name, value)
    out.print(table)
    for finding in advice.findings:
        color = "yellow" if finding.severity.value == "warning" else "green"
        out.print(f"[{color}]{finding.code}[/{color}]: {escape(finding.message)}\n  fix: {escape(finding.fix)}")
    out.print(f"recommendation: {escape(advice.recommendation)}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(plan_app, name="plan")
