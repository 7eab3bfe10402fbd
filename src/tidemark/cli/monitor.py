"""CLI commands of run monitoring: `tidemark analyze LOG` and `tidemark report LOG -o report.html`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from tidemark.cli.output import out, print_json

if TYPE_CHECKING:
    from tidemark.monitor.analyze import LogAnalysis

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}

LogArg = Annotated[
    str,
    typer.Argument(help="A progress log file (<run_id>.jsonl) or a [monitor] dir holding several; path or URI."),
]
LeakOpt = Annotated[
    int, typer.Option("--leak-batches", min=2, help="Flag state that grew without eviction in this many batches.")
]
ParallelismOpt = Annotated[
    int | None,
    typer.Option("--parallelism", min=1, help="Task slots of the cluster, if fewer than state store instances."),
]


def _render(result: LogAnalysis) -> None:
    from rich.markup import escape
    from rich.table import Table

    from tidemark.durations import in_words
    from tidemark.monitor.analyze import describe_source_lag, state_rows_text

    for run in result.runs:
        table = Table(title=escape(f"run {run.run_id}"), title_justify="left", show_header=False)
        table.add_column("figure", style="bold")
        table.add_column("value")
        table.add_row("query", escape(run.query_name or "-"))
        table.add_row("batches", f"{run.batches} ({run.first_batch} to {run.last_batch})" if run.batches else "0")
        table.add_row("input rows", f"{run.input_rows:,}")
        table.add_row("input rate", f"{run.input_rows_per_second:,.1f} rows/s")
        table.add_row("processed rate", f"{run.processed_rows_per_second:,.1f} rows/s")
        stats = run.batch_duration_ms
        if stats is not None:
            slowest = run.slowest_batches[0].batch_id if run.slowest_batches else "-"
            table.add_row(
                "batch duration",
                f"median {stats.p50:,.0f} ms, p99 {stats.p99:,.0f} ms, max {stats.max:,.0f} ms (batch {slowest})",
            )
        table.add_row("commit share", f"{run.commit_share:.1%} (worst batch {run.max_batch_commit_share:.1%})")
        for trend in run.state_rows_trend:
            flag = " [yellow]unbounded growth[/yellow]" if trend.unbounded else ""
            table.add_row(escape(f"state {trend.operator_id}:{trend.operator}"), escape(state_rows_text(trend)) + flag)
        table.add_row("dropped by watermark", f"{run.dropped_by_watermark:,}")
        table.add_row("quarantined", f"{run.quarantined:,}")
        lag = "-" if run.watermark_lag_seconds is None else in_words(run.watermark_lag_seconds)
        table.add_row("watermark lag", lag)
        if run.source_lag is not None:
            table.add_row("Kafka lag (last batch)", escape(describe_source_lag(run.source_lag)))
            table.add_row("Kafka lag (largest)", f"{run.max_source_lag or 0:,} records")
        out.print(table)
    if not result.findings:
        out.print("no findings")
        return
    out.print("[bold]findings[/bold]")
    for f in result.findings:
        style = _SEVERITY_STYLE.get(f.severity, "default")
        out.print(f"[{style}]{f.severity}[/{style}] {f.code} (run {escape(f.run_id)}): {escape(f.message)}")
        out.print(f"  fix: {escape(f.fix)}")


def analyze_command(
    log: LogArg,
    json_output: Annotated[bool, typer.Option("--json", help="Print the analysis as JSON.")] = False,
    leak_batches: LeakOpt = 5,
    parallelism: ParallelismOpt = None,
) -> None:
    """Per run: batches, rates, commit share, state growth, watermark lag, dropped rows, and findings."""
    from tidemark.monitor.analyze import analyze

    result = analyze(log, leak_batches=leak_batches, parallelism=parallelism)
    if json_output:
        print_json(result)
    else:
        _render(result)


def report_command(
    log: LogArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="The HTML file to write.")] = Path("report.html"),
    json_output: Annotated[bool, typer.Option("--json", help="Print what was written as JSON.")] = False,
    leak_batches: LeakOpt = 5,
    parallelism: ParallelismOpt = None,
) -> None:
    """Write a self-contained HTML report (charts and findings) of a progress log."""
    from tidemark.monitor.report import write_report

    result = write_report(log, output, leak_batches=leak_batches, parallelism=parallelism)
    if json_output:
        print_json(result)
    else:
        out.print(
            f"wrote {escape(str(result.path))}: {result.runs} run(s), {result.batches} batches, "
            f"{result.findings} finding(s)"
        )


def register(app: typer.Typer) -> None:
    """Add `analyze` and `report` to the root app."""
    app.command("analyze")(analyze_command)
    app.command("report")(report_command)
