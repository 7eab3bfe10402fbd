"""`tidemark recover CONFIG [--apply] [--to-batch N] [--per-key] [--json]`: plan, then carry out, a recovery."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tidemark.cli.output import err, out, print_json

if TYPE_CHECKING:
    from tidemark.recovery.apply import RecoveryResult
    from tidemark.recovery.archive import Move
    from tidemark.recovery.rollback import RollbackResult

ConfigArg = Annotated[Path, typer.Argument(help="The pipeline's TOML config file.", show_default=False)]


def _moves_table(moves: tuple[Move, ...]) -> Table:
    table = Table(title="moved aside (into the archive, never deleted)", show_lines=False)
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_column("example")
    counts = Counter(m.kind.value for m in moves)
    for kind, count in counts.items():
        example = next(m.source for m in moves if m.kind.value == kind)
        table.add_row(kind, str(count), example)
    return table


def _render_recovery(result: RecoveryResult) -> None:
    plan = result.plan
    table = Table(show_header=False, box=None)
    table.add_row("checkpoint", f"{plan.checkpoint} ({plan.checkpoint_state})")
    table.add_row("sink", f"{plan.sink} ({plan.committed_files} committed files)")
    newest = plan.newest_committed_window.isoformat() if plan.newest_committed_window else "none"
    table.add_row("newest committed window", newest + (" (per key: oldest newest)" if plan.per_key else ""))
    if plan.windows_read_from:
        table.add_row("windows read from", escape(plan.windows_read_from))
    table.add_row("newest event in source", plan.newest_event_time.isoformat() if plan.newest_event_time else "-")
    table.add_row("resume point", plan.resume_from.isoformat())
    table.add_row("replay", plan.replay)
    until = plan.rewritten_until.isoformat() if plan.rewritten_until else "as far as the data reaches"
    table.add_row("windows rewritten", f"starting {plan.rewritten_from.isoformat()} .. {until} (once final)")
    table.add_row("kept as they are", f"{len(plan.surviving_files)} files of windows before the resume point")
    table.add_row("archive", plan.archive)
    out.print(table)
    if plan.moves:
        out.print(_moves_table(plan.moves))
    for note in plan.notes:
        out.print(f"[yellow]note:[/yellow] {escape(note)}")
    if not result.applied:
        out.print("[bold]dry run[/bold]: nothing was changed; add --apply to do it")
        return
    if result.replay is not None:
        out.print(f"replayed {result.replay.batches} batch(es), {result.replay.input_rows:,} input rows")
    if result.own_log:
        out.print("the sink keeps its own log: what survived stays in it")
    elif result.injected_files is None:
        out.print("the surviving files join the sink log after the next run's first batch")
    else:
        out.print(f"added {result.injected_files} surviving file(s) to the new sink log")
    check = result.verification
    if check is not None:
        colour = "green" if check.ok else "red"
        out.print(
            f"[{colour}]verified[/{colour}]: {check.rows:,} rows, {check.duplicates} duplicate (key, window) with "
            f"{check.reader}"
            + (
                f"; {check.spark_rows} rows, {check.spark_duplicates} duplicates with Spark"
                if check.spark_rows is not None
                else ""
            )
        )


def _render_rollback(result: RollbackResult) -> None:
    plan = result.plan
    table = Table(show_header=False, box=None)
    table.add_row("checkpoint", plan.checkpoint)
    table.add_row("roll back to batch", str(plan.to_batch))
    table.add_row("newest planned / committed", f"{plan.latest_planned} / {plan.latest_committed}")
    table.add_row("batches undone", ", ".join(map(str, plan.undone_batches)) or "none")
    table.add_row("state version loaded next", str(plan.state_version))
    table.add_row("archive", plan.archive)
    out.print(table)
    if plan.moves:
        out.print(_moves_table(plan.moves))
    undo = plan.sink_undo.describe()
    if undo is not None:
        out.print(escape(undo))
    for note in plan.notes:
        out.print(f"[yellow]note:[/yellow] {escape(note)}")
    if result.applied:
        out.print(f"rolled back: the next `tidemark run` re-runs the batches after {plan.to_batch}")
    else:
        out.print("[bold]dry run[/bold]: nothing was changed; add --apply to do it")


def recover(
    config: ConfigArg,
    apply: Annotated[
        bool, typer.Option("--apply/--dry-run", help="Carry out the plan (default: only print it).")
    ] = False,
    to_batch: Annotated[
        int | None, typer.Option("--to-batch", help="Roll the checkpoint back to this committed batch instead.")
    ] = None,
    per_key: Annotated[
        bool, typer.Option("--per-key", help="Resume from the oldest of each key's newest committed window.")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Restart after a lost or corrupt checkpoint: nothing lost, nothing duplicated (dry run without --apply)."""
    from tidemark.config import load_config

    settings = load_config(config)
    if to_batch is not None:
        from tidemark.recovery.rollback import roll_back

        rollback = roll_back(settings, to_batch, apply=apply)
        if json_output:
            print_json(rollback)
        else:
            _render_rollback(rollback)
        return
    from tidemark.evolve.guard import SameQuery
    from tidemark.recovery.apply import recover_pipeline

    if apply and not json_output:
        err.print(f"recovering [cyan]{settings.pipeline.name}[/cyan]: archiving, then replaying")
    result = recover_pipeline(
        settings,
        apply=apply,
        per_key=per_key,
        precheck=SameQuery(settings, str(config)),
    )
    if json_output:
        print_json(result)
    else:
        _render_recovery(result)
    if result.verification is not None and not result.verification.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `recover` to the root app."""
    app.command("recover")(recover)
