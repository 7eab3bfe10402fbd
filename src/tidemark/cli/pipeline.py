"""CLI commands of the pipeline itself: run, generate, init."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from tidemark.cli.output import download_progress, err, out, program

ConfigArg = Annotated[Path, typer.Argument(help="The pipeline's TOML config file.", show_default=False)]


def _uses_rocksdb(progress: dict[str, Any]) -> bool:
    """True when a batch's state operators report RocksDB's custom metrics (the store that may not count rows)."""
    return any(
        key.startswith("rocksdb") for op in progress.get("stateOperators", []) for key in op.get("customMetrics") or {}
    )


class _BatchLines:
    """The run's line per batch; rows in state are "not tracked" for a RocksDB store that does not count them.

    Decided from each batch (the store a run uses is planned at its start: a new checkpoint's provider, or the
    one an existing checkpoint has), and the hint how to turn counting on is printed once, with the first such batch.
    """

    def __init__(self, counting_on: bool) -> None:
        self.counting_on = counting_on
        self.hinted = False

    def __call__(self, progress: dict[str, Any]) -> None:
        from tidemark.config.rocksdb import UNTRACKED_HINT

        tracked = self.counting_on or not _uses_rocksdb(progress)
        if not tracked and not self.hinted:
            self.hinted = True
            err.print(f"[dim]state rows {escape(UNTRACKED_HINT)}[/dim]")
        _batch_line(progress, tracked)


def _batch_line(progress: dict[str, Any], rows_tracked: bool = True) -> None:
    from tidemark.pipeline.listener import plan_skipped

    if plan_skipped(progress):
        err.print(
            f"batch {progress.get('batchId')}: no row read from its new input: in the sink before the last stop, "
            "so the sink skipped it (or its input was empty); its malformed records, if any, are read again"
        )
        return
    operators = progress.get("stateOperators", [])
    total = sum(int(op.get("numRowsTotal", 0)) for op in operators)
    state = f"state {total:,} rows" if rows_tracked else "state rows not tracked"
    dropped = sum(int(op.get("numRowsDroppedByWatermark", 0)) for op in progress.get("stateOperators", []))
    quarantine = (progress.get("observedMetrics") or {}).get("tidemark_quarantine") or {}
    watermark = (progress.get("eventTime") or {}).get("watermark") or "-"
    if watermark.startswith("1970-01-01T00:00:00"):
        watermark = "none yet"
    seconds = int(progress.get("batchDuration", 0)) / 1000
    err.print(
        f"batch {progress.get('batchId')}: {progress.get('numInputRows', 0):,} rows in {seconds:.1f}s, "
        f"{state}, watermark {watermark}, late dropped {dropped:,}, "
        f"quarantined {int(quarantine.get('count', 0) or 0):,}"
    )


def run(
    config: ConfigArg,
    available_now: Annotated[
        bool, typer.Option("--available-now", help="Process what is there now, then stop.")
    ] = False,
    max_duration: Annotated[
        str | None, typer.Option("--max-duration", help="Stop gracefully after this long, e.g. '4h'.")
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option("--allow", help="Continue despite this difference `tidemark check` reports (e.g. WATERMARK)."),
    ] = None,
) -> None:
    """Run the pipeline; SIGTERM/SIGINT or --max-duration stop it after the batch in flight commits."""
    from tidemark.config import load_config
    from tidemark.config.rocksdb import rows_tracked
    from tidemark.durations import parse_duration
    from tidemark.evolve.guard import RestartCheck
    from tidemark.monitor.publish import endpoint_lines
    from tidemark.pipeline.run import run_pipeline
    from tidemark.pipeline.start import JarsFetch
    from tidemark.recovery.failover import Failover

    settings = load_config(config)
    from tidemark.needs import spark_mode

    deadline = parse_duration(max_duration) if max_duration else None
    err.print(f"[bold]tidemark[/bold] running [cyan]{settings.pipeline.name}[/cyan] on {escape(spark_mode(settings))}")
    for line in endpoint_lines(settings.monitor):
        err.print(escape(line))
    # Jars fetched (first run) and verified with progress before the session starts; before anything is touched, a
    # checkpoint this config cannot continue is refused in one line (RestartCheck); then failover, then the query.
    restart = RestartCheck(str(config), frozenset(code.upper() for code in allow or []))
    result = run_pipeline(
        settings,
        available_now=available_now or None,
        max_duration=deadline,
        on_progress=_BatchLines(rows_tracked(settings.spark_conf())),
        on_warning=lambda text: err.print(f"[yellow]warning:[/yellow] {escape(text)}"),
        prestarts=(restart, Failover()),
        fetch=JarsFetch(download_progress(), f"tidemark jars fetch {config}"),
    )
    if result.interrupted:
        err.print(
            "[yellow]warning:[/yellow] batches ran back to back with no gap to stop in; the batch in flight was "
            "interrupted and will be re-run on restart (raise [trigger] interval or stop_timeout)"
        )
    table = Table(show_header=False, box=None)
    table.add_row("stopped", result.stopped.value)
    ids = f"ids {result.first_batch}..{result.last_batch}" if result.batches else "no new input"
    table.add_row("batches", f"{result.batches} ({ids})")
    table.add_row("input rows", f"{result.input_rows:,}")
    table.add_row("quarantined", f"{result.quarantined:,} -> {result.quarantine_path}")
    table.add_row("took", f"{result.duration.total_seconds():.1f}s")
    table.add_row("checkpoint", result.checkpoint)
    if result.monitor_log:
        table.add_row("progress log", result.monitor_log)
    table.add_row("output", result.output_path or "console")
    out.print(table)


def generate(
    directory: Annotated[Path, typer.Argument(help="Folder to write JSON-lines files into.", show_default=False)],
    events: Annotated[int, typer.Option("--events", help="Number of events.")] = 10_000,
    keys: Annotated[int, typer.Option("--keys", help="Number of distinct keys.")] = 100,
    files: Annotated[int, typer.Option("--files", help="Number of files (arrival order).")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 0,
    late_fraction: Annotated[float, typer.Option("--late-fraction", help="Share of very late events.")] = 0.0,
    malformed_fraction: Annotated[
        float, typer.Option("--malformed-fraction", help="Share of extra malformed lines.")
    ] = 0.0,
) -> None:
    """Write realistic test events: out of order within the watermark, some very late, some malformed."""
    from tidemark.pipeline.generate import generate_events

    result = generate_events(directory, events, keys, files, seed, late_fraction, malformed_fraction)
    out.print(
        f"wrote {result.events:,} events ({result.late_events:,} very late, {result.malformed_lines:,} malformed "
        f"lines) over {result.keys} keys into {len(result.files)} files in {result.directory}"
    )
    out.print(f"event time from {result.first_event_time:%Y-%m-%d %H:%M:%S} to {result.last_event_time:%H:%M:%S} UTC")


def init(directory: Annotated[Path, typer.Argument(help="Folder for the example.", show_default=False)]) -> None:
    """Write a ready example config and generated data into DIR."""
    from tidemark.pipeline.scaffold import init_project

    result = init_project(directory)
    out.print(
        f"wrote {escape(str(result.config_path))} and {result.data.events:,} events in "
        f"{escape(str(result.data.directory))}"
    )
    out.print(f"next: [bold]{escape(program())} run {escape(str(result.config_path))} --available-now[/bold]")


def register(app: typer.Typer) -> None:
    """Add run, generate and init to the root app."""
    app.command("run")(run)
    app.command("generate")(generate)
    app.command("init")(init)
