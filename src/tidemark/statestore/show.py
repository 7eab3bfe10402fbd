"""`state show`: the state rows themselves, keys and values flattened into columns."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.compat import StrEnum
from tidemark.errors import CheckpointError, UsageError
from tidemark.formats import Checkpoint, FetchReport
from tidemark.spark.lines import Feature, lacking
from tidemark.statestore.files import read_context, rows_from_files
from tidemark.statestore.metadata import StoreInfo, list_stores, stores_from_files
from tidemark.statestore.reader import (
    TIMERS,
    ReadTarget,
    flatten,
    parse_key_filter,
    read_state,
    run_action,
    state_session,
    targets_of,
)
from tidemark.steps import step

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


class ExportFormat(StrEnum):
    """File formats `state show` can write."""

    CSV = "csv"
    PARQUET = "parquet"


@dataclass(frozen=True)
class StateRows:
    """Flattened state rows of one store (at most `limit` of them unless exported)."""

    checkpoint: str
    batch: int
    operator: int
    store: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    exported_to: str | None
    fetched: FetchReport | None = None  # what was copied from remote storage to read it
    reader: str = "spark"  # "spark" or "files"
    note: str | None = None  # why the files were read (Spark's reader failed)


def plain(value: Any) -> Any:
    """A JSON-friendly form of one cell (timestamps as ISO text, decimals as text, bytes as base64)."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict | list):
        return json.loads(json.dumps(value, default=str))
    return value


def choose_target(stores: list[StoreInfo], operator: int | None, store: str | None) -> ReadTarget:
    """The target --operator/--store name; defaults to the only operator and its first store or variable."""
    operators = sorted({s.operator_id for s in stores})
    if operator is None:
        if len(operators) > 1:
            msg = f"the checkpoint has several stateful operators {operators}: pick one with --operator"
            raise UsageError(msg)
        operator = operators[0] if operators else 0
    candidates = [s for s in stores if s.operator_id == operator]
    if not candidates:
        if stores:
            msg = f"no state for operator {operator}: the checkpoint has operators {operators}"
            raise UsageError(msg)
        return ReadTarget(operator, store or "default")
    targets = [t for s in candidates for t in targets_of(s)]
    if not candidates[0].from_metadata:
        # Without metadata any name may be right (a join store, a state variable): pass it through.
        name = store or candidates[0].store
        return ReadTarget(operator, name)
    if store is None:
        return targets[0]
    for target in targets:
        if store in (target.label, target.store) and (target.state_variable is None or store == target.label):
            return target
    names = ", ".join(t.label for t in targets)
    msg = f"operator {operator} has no store or state variable {store!r}: choose one of {names}"
    raise UsageError(msg)


def _filtered(frame: DataFrame, predicate: Column, text: str) -> DataFrame:
    try:
        return frame.where(predicate)
    except Exception as exc:
        fields = ", ".join(frame.columns)
        msg = f"--key {text!r} does not apply to this store (columns: {fields}; use e.g. key.<field>): {exc}"
        raise UsageError(msg.splitlines()[0]) from exc


def _export(columns: tuple[str, ...], rows: list[tuple[Any, ...]], export: ExportFormat, output: str | Path) -> str:
    import pandas as pd

    table = pd.DataFrame(rows, columns=list(columns))
    destination = Path(output)
    destination.parent.mkdir(parents=True, exist_ok=True)
    if export is ExportFormat.CSV:
        table.to_csv(destination, index=False)
    else:
        table.to_parquet(destination, index=False)
    return str(destination)


def _show_from_files(
    path: str | Path,
    operator: int | None,
    store: str | None,
    batch: int | None,
    schemas: tuple[str | None, str | None],
    limit: int | None,
    export: ExportFormat | None,
    output: str | Path | None,
) -> StateRows:
    checkpoint = Checkpoint.open(str(path))
    checkpoint.require()
    context = read_context(checkpoint, batch)
    stores = stores_from_files(checkpoint, folders_only=True) or []
    target = choose_target(stores, operator, store)
    chosen = next(
        (s for s in stores if s.operator_id == target.operator_id and s.store == target.store),
        None,
    )
    if chosen is None:
        names = ", ".join(sorted({s.store for s in stores if s.operator_id == target.operator_id})) or "none"
        msg = f"operator {target.operator_id} has no store {target.store!r} in its files (stores: {names})"
        raise UsageError(msg)
    single = len({s.store for s in stores if s.operator_id == chosen.operator_id}) == 1
    with step(f"reading operator {chosen.operator_id} store {chosen.store} from its files"):
        columns, rows = rows_from_files(checkpoint, chosen, context, single, schemas, limit)
    exported = _export(columns, rows, export, output) if export is not None and output is not None else None
    return StateRows(
        checkpoint=checkpoint.uri,
        batch=context.batch,
        operator=chosen.operator_id,
        store=chosen.store,
        columns=columns,
        rows=() if exported else tuple(tuple(plain(v) for v in row) for row in rows),
        exported_to=exported,
        reader="files",
        note=context.note,
    )


def show_state(
    path: str | Path,
    operator: int | None = None,
    store: str | None = None,
    batch: int | None = None,
    key: str | None = None,
    limit: int | None = 20,
    export: ExportFormat | None = None,
    output: str | Path | None = None,
    reader: str = "auto",
    key_schema: str | None = None,
    value_schema: str | None = None,
) -> StateRows:
    """Read one store's rows, flattened; with export, write them all (or `limit`) to a CSV or Parquet file.

    reader "auto" uses Spark's statestore reader where the installed Spark has one and the files where it has none
    or fails; "files" decodes the store files without Spark, with the schema Spark recorded (3.1+) or the DDL
    given as key_schema/value_schema.
    """
    if limit is not None and limit < 0:
        msg = "--limit must be 0 or more"
        raise UsageError(msg)
    if export is not None and output is None:
        msg = f"--{export.value} needs an output file path"
        raise UsageError(msg)
    if reader not in ("auto", "spark", "files"):
        msg = f"--reader must be one of auto, spark, files, not {reader!r}"
        raise UsageError(msg)
    schemas = (key_schema, value_schema)
    use_files = reader == "files" or key_schema is not None or value_schema is not None
    # Spark's reader reads committed batches: a checkpoint written before Spark 2.2 has no commit log.
    use_files = use_files or (reader == "auto" and Checkpoint.open(str(path)).before_commit_log())
    missing = lacking(Feature.STATE_READER)
    if reader == "spark" and missing is not None:
        msg = f"--reader spark: {missing}"
        raise CheckpointError(msg)
    if use_files or missing is not None:
        if key is not None:
            msg = (
                "--key filters need Spark's state reader (--reader spark, Spark 4.0+); the files reader shows all rows"
            )
            raise UsageError(msg)
        return _show_from_files(path, operator, store, batch, schemas, limit, export, output)
    try:
        return _show_with_spark(path, operator, store, batch, key, limit, export, output)
    except CheckpointError as exc:
        if reader == "spark" or key is not None:
            raise
        try:
            shown = _show_from_files(path, operator, store, batch, schemas, limit, export, output)
        except CheckpointError as files_error:
            msg = f"{exc}; reading the files instead: {files_error}"
            raise CheckpointError(msg) from files_error
        return replace(shown, note=f"read from the files: Spark's reader failed ({exc})")


def _show_with_spark(
    path: str | Path,
    operator: int | None,
    store: str | None,
    batch: int | None,
    key: str | None,
    limit: int | None,
    export: ExportFormat | None,
    output: str | Path | None,
) -> StateRows:
    with state_session(path, (batch,)) as (spark, source):
        target = choose_target(list_stores(spark, source), operator, store)
        frame = read_state(spark, source, target, batch)
        predicate = parse_key_filter(key)
        if predicate is not None:
            frame = _filtered(frame, predicate, key or "")
        flat = flatten(frame)
        if limit is not None:
            flat = flat.limit(limit)
        exported = None
        if export is not None and output is not None:
            with step(f"reading operator {target.operator_id} store {target.label}"):
                table = run_action(flat.toPandas, source, target, batch)
            destination = Path(output)
            destination.parent.mkdir(parents=True, exist_ok=True)
            # Written beside it, then renamed: an interrupted export leaves no half-written file.
            partial = destination.with_name(f".{destination.name}.{os.getpid()}.partial")
            try:
                if export is ExportFormat.CSV:
                    table.to_csv(partial, index=False)
                else:
                    table.to_parquet(partial, index=False)
                os.replace(partial, destination)
            finally:
                partial.unlink(missing_ok=True)
            exported = str(destination)
            rows: tuple[tuple[Any, ...], ...] = ()
        else:
            with step(f"reading operator {target.operator_id} store {target.label}"):
                collected = run_action(flat.collect, source, target, batch)
            rows = tuple(tuple(plain(v) for v in row) for row in collected)
        return StateRows(
            checkpoint=source.uri,
            batch=batch if batch is not None else source.checkpoint.latest_committed_batch(),
            operator=target.operator_id,
            store=TIMERS if target.timers else target.label,
            columns=tuple(flat.columns),
            rows=rows,
            exported_to=exported,
            fetched=source.fetched,
        )
