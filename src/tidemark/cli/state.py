"""CLI commands for state: `tidemark state stats|show|diff|expired|repartition`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from tidemark.cli.output import err, out, print_json
from tidemark.errors import UsageError

if TYPE_CHECKING:
    from tidemark.formats import FetchReport
    from tidemark.statestore.diff import StateDiff
    from tidemark.statestore.expired import ExpiredReport
    from tidemark.statestore.show import StateRows
    from tidemark.statestore.stats import Reader, StateStats

state_app = typer.Typer(
    name="state",
    help="Read, summarize and diff what a checkpoint's state stores hold.",
    no_args_is_help=True,
)

PathArg = Annotated[
    str, typer.Argument(help="The query's checkpoint folder or URI (abfss://, s3a://, ...).", show_default=False)
]
BatchOpt = Annotated[int | None, typer.Option("--batch", help="Batch id to read (default: latest committed).")]
OperatorOpt = Annotated[int | None, typer.Option("--operator", help="Stateful operator id.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def _size(value: int) -> str:
    from tidemark.sizes import format_size

    return format_size(value)


def _fetched(report: FetchReport | None) -> None:
    """Say what reading remote state copied (on stderr, so --json output stays clean)."""
    if report is not None:
        err.print(
            f"fetched {report.files:,} file(s), {_size(report.bytes_fetched)} new and {_size(report.bytes_cached)} "
            f"already cached, into {escape(report.cache)}"
        )


def _render_stats(result: StateStats) -> None:
    from rich.table import Table

    table = Table(title=f"state of {result.checkpoint} at batch {result.batch}")
    for column in ("op", "name", "store", "rows", "~bytes", "disk", "partitions", "max/median", "timers"):
        table.add_column(column, justify="right" if column not in ("name", "store") else "left")
    for op in result.operators:
        skew = f"{op.skew:.2f}" if op.skew is not None else "-"
        timers = str(op.timers) if op.timers is not None else ""
        rows = f"{op.rows:,}" if op.rows is not None else "[red]unreadable[/red]"
        size = _size(op.approx_bytes) if op.approx_bytes is not None else "-"
        table.add_row(
            str(op.id), op.name, op.store, rows, size, _size(op.disk_bytes), str(len(op.partitions)), skew, timers,
        )  # fmt: skip
        for var in op.state_variables:
            table.add_row(
                "",
                f"  {var.kind}",
                f"  {var.name}",
                f"{var.rows:,}",
                _size(var.approx_bytes) if var.approx_bytes is not None else "-",
                "",
                "",
                "",
                "",
            )
    out.print(table)
    if result.note:
        out.print(f"[yellow]note:[/yellow] {escape(result.note)}")
    for op in result.operators:
        if op.note:
            out.print(f"[yellow]operator {op.id}:[/yellow] {escape(op.note)}")


ReaderOpt = Annotated[
    str,
    typer.Option(
        "--reader",
        help="auto: Spark's state reader (Spark 4.0+), the files where it lacks or fails; spark; files (no JVM).",
    ),
]


def _reader(value: str) -> Reader:
    from tidemark.statestore.stats import Reader

    try:
        return Reader(value)
    except ValueError:
        msg = f"--reader must be one of {', '.join(r.value for r in Reader)}, not {value!r}"
        raise UsageError(msg) from None


@state_app.command("stats")
def stats(
    path: PathArg,
    batch: BatchOpt = None,
    operator: OperatorOpt = None,
    as_json: JsonOpt = False,
    reader: ReaderOpt = "auto",
) -> None:
    """Rows, bytes and partition skew per operator, store and state variable; exit 1 for state it cannot read."""
    from tidemark.statestore.stats import state_stats

    result = state_stats(path, batch=batch, operator=operator, reader=_reader(reader))
    _fetched(result.fetched)
    print_json(result) if as_json else _render_stats(result)
    for op in result.unreadable:
        where = f"operator {op.id}[/bold red] (store {escape(op.store)})"
        err.print(f"[bold red]cannot read state of {where}: {escape(op.error or '')}")
    if result.unreadable:
        raise typer.Exit(1)


def _render_rows(result: StateRows) -> None:
    from rich.table import Table

    if result.exported_to:
        out.print(
            f"wrote state of operator {result.operator} store {result.store} to {escape(str(result.exported_to))}"
        )
        return
    table = Table(title=f"operator {result.operator} store {result.store} at batch {result.batch}")
    for column in result.columns:
        table.add_column(column)
    for row in result.rows:
        table.add_row(*(json.dumps(v) if isinstance(v, dict | list) else str(v) for v in row))
    out.print(table)
    out.print(f"{len(result.rows)} row(s)")


@state_app.command("show")
def show(
    path: PathArg,
    operator: OperatorOpt = None,
    store: Annotated[
        str | None, typer.Option("--store", help="Store name, or state variable of a transformWithState ($timers).")
    ] = None,
    batch: BatchOpt = None,
    key: Annotated[str | None, typer.Option("--key", help="SQL filter on key/value, e.g. \"key.user = 'u1'\".")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Rows to show (default 20; all when exporting).")] = None,
    as_json: JsonOpt = False,
    csv: Annotated[Path | None, typer.Option("--csv", help="Write the rows to this CSV file.")] = None,
    parquet: Annotated[Path | None, typer.Option("--parquet", help="Write the rows to this Parquet file.")] = None,
    reader: ReaderOpt = "auto",
    key_schema: Annotated[
        str | None,
        typer.Option("--key-schema", help="Key schema as Spark DDL, to decode the files (reads them without Spark)."),
    ] = None,
    value_schema: Annotated[
        str | None, typer.Option("--value-schema", help="Value schema as Spark DDL (with --key-schema).")
    ] = None,
) -> None:
    """The state rows themselves, keys and values flattened into columns."""
    from tidemark.statestore.show import ExportFormat, show_state

    if sum((csv is not None, parquet is not None, as_json)) > 1:
        msg = "choose one of --json, --csv, --parquet"
        raise UsageError(msg)
    export = ExportFormat.CSV if csv else ExportFormat.PARQUET if parquet else None
    rows_limit = limit if limit is not None or export is not None else 20
    result = show_state(
        path, operator, store, batch, key, rows_limit, export, csv or parquet,
        reader=_reader(reader).value, key_schema=key_schema, value_schema=value_schema,
    )  # fmt: skip
    _fetched(result.fetched)
    print_json(result) if as_json else _render_rows(result)
    if result.note:
        err.print(f"[yellow]note:[/yellow] {escape(result.note)}")


def _render_diff(result: StateDiff) -> None:
    from rich.table import Table

    table = Table(title=f"state changes from batch {result.from_batch} to {result.to_batch}")
    for column in ("op", "store", "added", "updated", "removed", "method"):
        table.add_column(column)
    for diff in result.stores:
        table.add_row(
            str(diff.operator),
            diff.store,
            f"{diff.added:,}",
            f"{diff.updated:,}",
            f"{diff.removed:,}",
            diff.method.value,
        )
    out.print(table)
    for diff in result.stores:
        for change in diff.samples:
            out.print(
                f"  op {diff.operator} {diff.store} {change.change.value}: key={json.dumps(change.key)} "
                f"before={json.dumps(change.before)} after={json.dumps(change.after)}"
            )


@state_app.command("diff")
def diff(
    path: PathArg,
    from_batch: Annotated[int, typer.Option("--from", help="Earlier batch id.", show_default=False)],
    to_batch: Annotated[int, typer.Option("--to", help="Later batch id.", show_default=False)],
    operator: OperatorOpt = None,
    store: Annotated[str | None, typer.Option("--store", help="Only this store or state variable.")] = None,
    sample: Annotated[int, typer.Option("--sample", help="Sample keys per kind of change.")] = 5,
    as_json: JsonOpt = False,
) -> None:
    """What changed between two batches: added, updated, removed keys, counts and samples."""
    from tidemark.statestore.diff import diff_state

    result = diff_state(path, from_batch, to_batch, operator=operator, store=store, sample=sample)
    _fetched(result.fetched)
    print_json(result) if as_json else _render_diff(result)


def _when(epoch_ms: int) -> str:
    """An epoch-milliseconds watermark or timeout as ISO time (UTC); none before the first watermark."""
    from datetime import datetime

    from tidemark.compat import UTC

    if epoch_ms <= 0:
        return "none yet"
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _render_expired(result: ExpiredReport) -> None:
    from rich.table import Table

    out.print(
        f"batch {result.batch}: watermark {_when(result.batch_watermark_ms)}, "
        f"committed for the next batch {_when(result.committed_watermark_ms)}"
    )
    table = Table(title="expired but never removed")
    for column in ("op", "name", "kind", "keys", "expired", "by reason"):
        table.add_column(column)
    for op in result.operators:
        reasons = ", ".join(f"{k}={v}" for k, v in op.by_reason.items()) if op.checked else op.note or ""
        table.add_row(str(op.id), op.name, op.kind, f"{op.keys_with_state:,}", f"{op.expired:,}", reasons)
    out.print(table)
    for op in result.operators:
        for key in op.keys:
            at = _when(key.timeout_ms) if key.timeout_ms is not None else "none"
            out.print(f"  op {op.id} {key.reason.value}: key={escape(json.dumps(key.key))} at {at}")


@state_app.command("expired")
def expired(
    path: PathArg,
    batch: BatchOpt = None,
    operator: OperatorOpt = None,
    limit: Annotated[int, typer.Option("--limit", help="Keys listed per operator.")] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Keys whose event-time timeout or timer is behind the committed watermark but still hold state."""
    from tidemark.statestore.expired import find_expired

    result = find_expired(path, batch=batch, operator=operator, limit=limit)
    _fetched(result.fetched)
    print_json(result) if as_json else _render_expired(result)


@state_app.command("repartition")
def repartition(
    path: PathArg,
    partitions: Annotated[
        int, typer.Option("--partitions", help="The new number of shuffle partitions.", show_default=False)
    ],
    apply: Annotated[
        bool, typer.Option("--apply/--dry-run", help="Write it (default: a dry run that only reads).")
    ] = False,
    to: Annotated[
        str | None, typer.Option("--to", help="Write the new checkpoint to this folder; leave the old one as it is.")
    ] = None,
    state_store: Annotated[
        str | None, typer.Option("--state-store", help="Also move the state to this store: rocksdb or hdfs.")
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="What writes the state: auto (tidemark's writer, 4.0+), tidemark, or spark (Spark's own, 4.2+).",
        ),
    ] = "auto",
    as_json: JsonOpt = False,
) -> None:
    """Rewrite a stopped query's state for N shuffle partitions (old checkpoint archived, never deleted)."""
    from tidemark.cli.evolve import render_repartition
    from tidemark.evolve.repartition import Engine, repartition_checkpoint

    if engine not in {e.value for e in Engine}:
        msg = f"--engine must be one of {', '.join(e.value for e in Engine)} (got {engine!r})"
        raise UsageError(msg)
    result = repartition_checkpoint(
        path, partitions, apply=apply, to=to, state_store=state_store, engine=Engine(engine)
    )
    print_json(result) if as_json else render_repartition(result)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(state_app, name="state")
