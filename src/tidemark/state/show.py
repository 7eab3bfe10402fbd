"""`state show`: the state rows themselves, keys and values flattened into columns."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.compat import StrEnum
from tidemark.errors import UsageError
from tidemark.formats import FetchReport
from tidemark.state.metadata import StoreInfo, list_stores
from tidemark.state.reader import (
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


def show_state(
    path: str | Path,
    operator: int | None = None,
    store: str | None = None,
    batch: int | None = None,
    key: str | None = None,
    limit: int | None = 20,
    export: ExportFormat | None = None,
    output: str | Path | None = None,
) -> StateRows:
    """Read one store's rows, flattened; with export, write them all (or `limit`) to a CSV or Parquet file."""
    if limit is not None and limit < 0:
        msg = "--limit must be 0 or more"
        raise UsageError(msg)
    if export is not None and output is None:
        msg = f"--{export.value} needs an output file path"
        raise UsageError(msg)
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
