"""`tidemark adopt CONFIG --from-checkpoint OLD [--old-sink OLD_SINK] [--apply]`: cut a plain-Spark job over."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tidemark.cli.output import err, out, print_json

if TYPE_CHECKING:
    from tidemark.recovery.adopt import AdoptionResult


def _render(result: AdoptionResult) -> None:
    plan = result.plan
    table = Table(show_header=False, box=None)
    table.add_row("old checkpoint", f"{escape(plan.old_checkpoint)} (last committed batch {plan.old_batch})")
    emitted = plan.emitted_through.isoformat() if plan.emitted_through else "none (no window was emitted)"
    table.add_row("old job emitted", f"windows ending at or before {emitted}")
    if plan.position is not None:
        table.add_row("source position", escape(plan.position.describe()))
    if plan.old_sink is not None:
        newest = plan.old_sink.newest_start.isoformat() if plan.old_sink.newest_start else "none"
        table.add_row(
            "old sink (kept as is)",
            f"{escape(plan.old_sink.uri)}: {plan.old_sink.files:,} committed file(s), {plan.old_sink.rows:,} rows, "
            f"newest window start {newest}",
        )
    table.add_row("replay point", f"{plan.resume_from.isoformat()} (the first window still open)")
    table.add_row("replay", escape(plan.replay))
    table.add_row("new checkpoint", escape(plan.checkpoint))
    table.add_row("new sink", f"{escape(plan.sink)}: windows starting at or after the replay point")
    out.print(table)
    for note in plan.notes:
        out.print(f"[yellow]note:[/yellow] {escape(note)}")
    if not result.applied:
        out.print("[bold]dry run[/bold]: nothing was changed; stop the old job, then add --apply")
        return
    if result.replay is not None:
        out.print(
            f"replayed {result.replay.batches} batch(es), {result.replay.input_rows:,} input rows; "
            f"from now on: tidemark run CONFIG (every run keeps the replay point)"
        )


def adopt(
    config: Annotated[Path, typer.Argument(help="The TOML describing the job, with a NEW checkpoint and sink.")],
    from_checkpoint: Annotated[
        str, typer.Option("--from-checkpoint", help="The old job's checkpoint folder.", show_default=False)
    ],
    old_sink: Annotated[
        str | None, typer.Option("--old-sink", help="The old job's output folder, audited and kept as it is.")
    ] = None,
    apply: Annotated[bool, typer.Option("--apply/--dry-run", help="Do it (default: print the plan).")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Move a stopped plain-Spark window job over to tidemark: nothing lost, nothing twice (docs/adopt.md)."""
    from tidemark.config import load_config
    from tidemark.evolve.guard import require_describes_old_job
    from tidemark.recovery.adopt import adopt_job

    settings = load_config(config)
    if apply and not json_output:
        err.print(f"adopting [cyan]{escape(from_checkpoint)}[/cyan] into [cyan]{settings.pipeline.name}[/cyan]")
    result = adopt_job(
        settings,
        from_checkpoint,
        old_sink,
        apply=apply,
        precheck=lambda launch: require_describes_old_job(
            settings, str(config), from_checkpoint, launch.session(), read_with=launch.config
        ),
    )
    if json_output:
        print_json(result)
    else:
        _render(result)


def register(app: typer.Typer) -> None:
    """Add `adopt` to the root app."""
    app.command("adopt")(adopt)
