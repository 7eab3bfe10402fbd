"""CLI commands for checkpoints: `tidemark checkpoint inspect` and `tidemark checkpoint prune`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from tidemark.cli.output import out, print_json

if TYPE_CHECKING:
    from tidemark.doctor.prune import PruneResult
    from tidemark.doctor.report import CheckpointReport
    from tidemark.sources.kafka import KafkaSourceReport

checkpoint_app = typer.Typer(
    name="checkpoint",
    help="See what a checkpoint holds and keep it small.",
    no_args_is_help=True,
)
_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _size(value: int) -> str:
    from tidemark.sizes import format_size

    return format_size(value)


def _render_report(report: CheckpointReport) -> None:
    from rich.table import Table

    out.print(f"[bold]checkpoint[/bold] {escape(report.path)}")
    out.print(f"  query id            {report.query_id or '-'}")
    out.print(
        f"  latest planned      {_opt(report.latest_offset_batch)} (watermark {_opt(report.latest_offset_watermark)})"
    )
    out.print(
        f"  latest committed    {_opt(report.latest_committed_batch)} "
        f"(next watermark {_opt(report.latest_committed_watermark)})"
    )
    out.print(f"  state provider      {report.state_provider or '-'}, format v{_opt(report.checkpoint_format_version)}")
    out.print(f"  source offsets      {escape(json.dumps(report.source_offsets))}")
    if report.offset_log_version is not None and report.commit_log_version is not None:
        sources = f" (sources {', '.join(report.source_names)})" if report.source_names else ""
        sinks = f" (sinks {', '.join(report.sink_names)})" if report.sink_names else ""
        out.print(
            f"  logs                offsets v{report.offset_log_version}{sources}, "
            f"commits v{report.commit_log_version}{sinks}"
        )
    out.print(f"  files               {report.files_total:,} ({_size(report.bytes_total)})")
    folders = Table(title="files per folder", title_justify="left")
    for column in ("folder", "files", "bytes"):
        folders.add_column(column, justify="left" if column == "folder" else "right")
    for folder in report.folders:
        folders.add_row(folder.folder, f"{folder.files:,}", _size(folder.bytes))
    out.print(folders)
    if report.operators:
        # One block per operator rather than a 9-column table: it stays readable in an 80-column terminal.
        out.print("[bold]stateful operators[/bold]")
        for op in report.operators:
            kinds = ", ".join(f"{k} {c.files:,}" for k, c in op.files_by_kind.items() if c.files)
            out.print(
                f"  {op.id} {op.name or '(no operator metadata)'}: {op.partitions} partitions, "
                f"stores {', '.join(op.store_names)}"
                + (f" (column families {', '.join(op.column_families)})" if op.column_families else "")
            )
            out.print(
                f"      versions {op.versions_held} ({_opt(op.oldest_version)}..{_opt(op.latest_version)}), "
                f"{op.files:,} files ({_size(op.bytes)}), replay on load up to {op.max_replay_on_load}"
            )
            out.print(f"      by kind: {kinds or '-'}")
    if report.kafka is not None:
        _render_kafka(report.kafka)
    for title, text in report.sink.describe() if report.sink is not None else ():
        out.print(f"[bold]{escape(title)}[/bold] {escape(text)}" if title else escape(text))
    if not report.findings:
        out.print("[green]no findings[/green]")
    for finding in report.findings:
        style = _SEVERITY_STYLE[finding.severity.value]
        out.print(f"[{style}]{finding.severity.value.upper()} {finding.code}[/{style}]: {escape(finding.message)}")
        if finding.impact:
            out.print(f"  impact: {escape(finding.impact)}")
        out.print(f"  fix: {escape(finding.fix)}")


def _render_kafka(kafka: KafkaSourceReport) -> None:
    from rich.table import Table

    broker = f" against {escape(kafka.broker)}" if kafka.broker else " (add --source CONFIG for lag)"
    table = Table(title=f"Kafka offsets{broker}", title_justify="left")
    columns = ["topic", "partition", "committed", "planned"]
    if kafka.broker:
        columns += ["earliest", "end", "lag"]
    for column in columns:
        table.add_column(column, justify="left" if column == "topic" else "right")
    for p in kafka.partitions:
        row = [escape(p.topic), str(p.partition), _opt(p.committed), _opt(p.planned)]
        if kafka.broker:
            lag = "-" if p.lag is None else f"{p.lag:,}"
            row += [_opt(p.earliest), _opt(p.end), f"[red]{lag}[/red]" if p.expired else lag]
        table.add_row(*row)
    out.print(table)
    if kafka.total_lag is not None:
        out.print(f"  lag {kafka.total_lag:,} records over {len(kafka.partitions)} partitions")


def _opt(value: object) -> str:
    return "-" if value is None else str(value)


def _render_prune(result: PruneResult) -> None:
    if result.finished_files or result.finished_already_gone:
        out.print(
            f"finished an interrupted prune: removed the {result.finished_files:,} file(s) it had left "
            f"({result.finished_already_gone:,} were already gone)"
        )
    verb = "removed" if result.applied else "would remove"
    newest = result.latest_committed_batch
    first = result.history_from_batch if result.history_from_batch is not None else result.keep_from_batch
    extra = (
        f"; batch {result.keep_from_batch}'s log entries stay too (Spark reads the entry before the latest on restart)"
        if result.keep_from_batch < first
        else ""
    )
    more = " more" if result.finished_files else ""
    done = (
        f"nothing{more} to remove from {escape(result.path)}"
        if not result.files
        else f"{verb} {result.files:,}{more} files ({_size(result.bytes)}) from {escape(result.path)}"
    )
    out.print(f"{done}: keeping batches {first}..{newest} (the last {result.keep} committed) and their state{extra}")
    for folder in result.by_folder:
        out.print(f"  {folder.folder:<24} {folder.files:>10,} files {_size(folder.bytes):>12}")
    for note in result.notes:
        out.print(f"  [yellow]note[/yellow]: {escape(note)}")
    if not result.applied and result.files:
        out.print("dry run: nothing was removed; add --apply to remove these files")


def inspect_command(
    path: Annotated[str, typer.Argument(help="Checkpoint folder or URI (hdfs://, abfss://, s3a://).")],
    sink: Annotated[
        str | None,
        typer.Option(
            "--sink",
            help="The sink: a file sink's output folder (its log), a Delta or Iceberg table's folder, or the metadata "
            "file an Iceberg catalog names.",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    max_files: Annotated[int, typer.Option(help="TOO_MANY_FILES above this many files.")] = 100_000,
    max_replay: Annotated[int, typer.Option(help="LONG_REPLAY_CHAIN above this many deltas/changelogs.")] = 50,
    max_history: Annotated[int, typer.Option(help="RETENTION_TOO_HIGH above this many batches/versions.")] = 200,
    max_sink_compact: Annotated[str, typer.Option(help="SINK_METADATA_GROWTH above this compact size.")] = "100m",
    max_delta_files: Annotated[
        int, typer.Option(help="DELTA_SMALL_FILES from this many active files (averaging under 32 MB).")
    ] = 1000,
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            help="The pipeline's TOML config (Kafka/Event Hubs): ask the broker for each partition's earliest and "
            "end offsets, show the lag, find offsets already expired.",
        ),
    ] = None,
) -> None:
    """Report what a checkpoint holds and what is wrong; exit 1 when a finding is an error."""
    from tidemark.doctor.findings import Thresholds
    from tidemark.doctor.inspect import inspect_checkpoint
    from tidemark.sizes import parse_size

    thresholds = Thresholds(
        max_files=max_files,
        max_replay=max_replay,
        max_history=max_history,
        max_sink_compact_bytes=parse_size(max_sink_compact),
        max_delta_files=max_delta_files,
    )
    source_config = None
    if source is not None:
        from tidemark.config import load_config

        source_config = load_config(source)
    report = inspect_checkpoint(path, sink=sink, thresholds=thresholds, source=source_config)
    if json_output:
        print_json(report)
    else:
        _render_report(report)
    if report.has_errors:
        raise typer.Exit(1)


def prune_command(
    path: Annotated[str, typer.Argument(help="Checkpoint folder or URI.")],
    keep: Annotated[int, typer.Option("--keep", help="Committed batches of history to keep (at least 1).")],
    apply: Annotated[
        bool, typer.Option("--apply/--dry-run", help="Really remove the files (default: dry run).")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    sink: Annotated[
        str | None,
        typer.Option(
            "--sink",
            help="A file sink's output folder: its log's entries before the kept batches' compaction go too.",
        ),
    ] = None,
) -> None:
    """Remove old log entries and state files Spark will never need again (dry run unless --apply)."""
    from tidemark.doctor.prune import prune_checkpoint

    result = prune_checkpoint(path, keep, apply=apply, sink=sink)
    if json_output:
        print_json(result)
    else:
        _render_prune(result)


checkpoint_app.command("inspect")(inspect_command)
checkpoint_app.command("prune")(prune_command)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(checkpoint_app, name="checkpoint")
