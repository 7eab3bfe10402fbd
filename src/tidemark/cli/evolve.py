"""CLI for changing a job without losing its state: `tidemark check` and the renderer of `state repartition`."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from tidemark.cli.output import err, out, print_json

if TYPE_CHECKING:
    from tidemark.evolve.check import CheckReport
    from tidemark.evolve.repartition import RepartitionReport

_LISTED = 16  # partition counts up to this are listed one by one; above, min / median / max


def _size(value: int) -> str:
    from tidemark.sizes import format_size

    return format_size(value)


def _spread(values: tuple[int, ...]) -> str:
    if len(values) <= _LISTED:
        return " ".join(f"{v:,}" for v in values)
    return f"min {min(values):,} / median {statistics.median(values):,.0f} / max {max(values):,}"


def _provider(name: str) -> str:
    return name.rsplit(".", 1)[-1].replace("StateStoreProvider", "")


def render_repartition(report: RepartitionReport) -> None:
    """The dry run or the result of `state repartition`."""
    from rich.table import Table

    provider = _provider(report.provider)
    change = provider if report.new_provider == report.provider else f"{provider} -> {_provider(report.new_provider)}"
    out.print(
        f"[bold]{'repartitioned' if report.applied else 'repartition plan for'}[/bold] {escape(report.checkpoint)} "
        f"at batch {report.batch} (state version {report.state_version}): "
        f"{report.old_partitions} -> {report.new_partitions} partitions, {change} store"
    )
    table = Table()
    for column in ("op", "name", "store", "rows", "~bytes", "disk"):
        table.add_column(column, justify="left" if column in ("name", "store") else "right")
    table.add_column(f"rows per old partition ({report.old_partitions})")
    table.add_column(f"keys per new partition ({report.new_partitions})")
    for store in report.stores:
        table.add_row(
            str(store.operator_id),
            store.operator,
            store.store,
            f"{sum(store.rows_by_old_partition):,}",
            _size(store.approx_bytes),
            _size(store.disk_bytes),
            _spread(store.rows_by_old_partition),
            _spread(store.keys_by_new_partition),
        )
    out.print(table)
    for store in report.stores:
        if len(store.column_families) > 1:
            out.print(f"  operator {store.operator_id} column families: {', '.join(store.column_families)}")
    for note in report.notes:
        out.print(f"  {escape(note)}")
    if not report.applied:
        where = (
            f"a new checkpoint at {escape(report.new_checkpoint)}; the old one stays where it is"
            if report.archive is None
            else f"the new checkpoint in its place; the old one moves to {escape(report.archive)} (never deleted)"
        )
        out.print(f"[yellow]dry run:[/yellow] nothing written. With --apply: {where}.")
        return
    if report.verification is not None:
        rows = sum(t.rows_after for t in report.verification.targets)
        out.print(
            f"[green]verified[/green] with Spark's statestore reader: {rows:,} row(s) in "
            f"{len(report.verification.targets)} store(s)/variable(s) identical before and after; state-metadata "
            f"reports {report.new_partitions} partitions"
        )
    if report.new_disk_bytes is not None:
        layout = " (one snapshot per partition)" if report.engine == "tidemark" else ""
        out.print(f"  new state on disk: {_size(report.new_disk_bytes)}{layout}")
    if report.archive is not None:
        out.print(f"  old checkpoint kept at {escape(report.archive)}")
    out.print(f"  the query continues from {escape(report.new_checkpoint)}")
    out.print(
        escape(
            f"  next: set [spark] shuffle_partitions = {report.new_partitions} in the pipeline config "
            "(Spark takes the count from the checkpoint either way; 'tidemark check' then agrees)"
        )
    )


def _render_check(report: CheckReport) -> None:
    verdict = "[green]compatible[/green]" if report.compatible else "[bold red]incompatible[/bold red]"
    at = "no committed batch yet" if report.batch is None else f"batch {report.batch}"
    out.print(f"{verdict}: {escape(report.config)} against {escape(report.checkpoint)} ({at})")
    for problem in report.problems:
        style = "red" if problem.blocking else "yellow"
        allowed = "" if problem.blocking else " (allowed)"
        out.print(f"  [{style}]{problem.code}{allowed}[/{style}] {escape(problem.message)}")
        out.print(f"      fix: {escape(problem.fix)}")
    for line in report.compared:
        out.print(f"  [dim]ok[/dim] {escape(line)}")
    if report.rehearsal is not None:
        style = "green" if report.rehearsal.ok else "bold red"
        out.print(f"[{style}]rehearsal:[/{style}] {escape(report.rehearsal.verdict)}")


ConfigArg = Annotated[Path, typer.Argument(help="The pipeline's TOML config file.", show_default=False)]


def check(
    config: ConfigArg,
    rehearse: Annotated[
        bool, typer.Option("--rehearse", help="Also run the new query once on a copy of the checkpoint.")
    ] = False,
    allow: Annotated[
        list[str] | None,
        typer.Option("--allow", help="Accept this result-changing difference (e.g. WATERMARK); repeatable."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Can this config (and its processor code) restart from its existing checkpoint? Exit 1 when not."""
    from tidemark.config import load_config
    from tidemark.evolve.check import check_config
    from tidemark.needs import spark_mode

    accepted = frozenset(code.upper() for code in allow or [])
    settings = load_config(config)
    err.print(f"checking {escape(str(config))} on {escape(spark_mode(settings))}")
    report = check_config(settings, str(config), rehearse_query=rehearse, allow=accepted)
    print_json(report) if as_json else _render_check(report)
    if not report.compatible:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("check")(check)
