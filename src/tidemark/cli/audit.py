"""`tidemark audit CONFIG [--json]`: an exactly-once ledger of the sink; exit 1 naming batches and files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tidemark.cli.output import out, print_json


def audit(
    config: Annotated[Path, typer.Argument(help="The pipeline's TOML config file.", show_default=False)],
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    batches: Annotated[bool, typer.Option("--batches", help="List every committed batch.")] = False,
) -> None:
    """Check that the sink holds each result exactly once, batch by batch (read-only)."""
    from tidemark.config import load_config
    from tidemark.recovery.audit import audit_sink

    result = audit_sink(load_config(config))
    if json_output:
        print_json(result)
    else:
        summary = Table(show_header=False, box=None)
        summary.add_row("checkpoint", escape(result.checkpoint))
        summary.add_row("sink", escape(result.sink))
        summary.add_row("committed batches", str(len(result.batches)))
        summary.add_row("data files", f"{result.data_files:,}")
        summary.add_row("rows (as the sink's readers see it)", f"{result.rows_on_storage:,}")
        summary.add_row("identity", ", ".join(result.key_columns) or "-")
        out.print(summary)
        if batches:
            table = Table("batch", "read", "sink files", "rows", "sink log", "ledger")
            for record in result.batches:
                table.add_row(
                    str(record.batch),
                    str(len(record.source)),
                    str(len(record.sink_files)),
                    "-" if record.rows is None else f"{record.rows:,}",
                    "yes" if record.in_sink_log else "NO",
                    "yes" if record.in_ledger else "no",
                )
            out.print(table)
        for note in result.notes:
            out.print(f"[yellow]note:[/yellow] {escape(note)}")
        for violation in result.violations:
            where = f" batches {', '.join(map(str, violation.batches))}" if violation.batches else ""
            out.print(f"[red]{violation.kind.value}[/red]{where}: {escape(violation.message)}")
            for name in violation.files:
                out.print(f"    {escape(name)}")
        if result.ok:
            out.print("[green]exactly once[/green]: every committed batch is in the sink once, nothing else is")
    if not result.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `audit` to the root app."""
    app.command()(audit)
