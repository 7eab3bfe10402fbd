"""What `tidemark audit` finds in a sink, in the words every sink answers in (sinks/base.py `Sink.audit`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidemark.compat import StrEnum

MAX_LISTED = 20  # files or keys named per violation; the count says how many there are


class ViolationKind(StrEnum):
    """What breaks exactly-once."""

    DUPLICATE_KEY = "duplicate-key"  # a (key, window) twice for the sink's readers
    BATCH_WRITTEN_TWICE = "batch-written-twice"  # a table sink: two commits carry one batch's transaction
    FILE_IN_TWO_BATCHES = "file-in-two-batches"
    BATCH_WITHOUT_SINK_ENTRY = "batch-without-sink-entry"
    FILE_OUTSIDE_EVERY_BATCH = "file-outside-every-batch"
    LISTED_FILE_MISSING = "listed-file-missing"
    SINK_LOG_GAP = "sink-log-gap"  # Spark's repartition batch has no sink log file while later batches have one
    ROWS_DIFFER = "rows-differ"  # the ledger's row count against the batch's files


@dataclass(frozen=True)
class Violation:
    """One way the sink is not exactly-once, with the batches and files involved."""

    kind: ViolationKind
    message: str
    batches: tuple[int, ...] = ()
    files: tuple[str, ...] = ()
    count: int = 0


@dataclass(frozen=True)
class BatchRecord:
    """One committed batch, as the checkpoint and the sink's own records (its log, tidemark's ledger) tell it."""

    batch: int
    source: tuple[str, ...]  # files read, or the Kafka offsets the batch ended at
    sink_files: tuple[str, ...]
    rows: int | None  # rows written, None when not recorded
    in_sink_log: bool
    in_ledger: bool


@dataclass(frozen=True)
class SinkAudit:
    """What a sink's own records say of a checkpoint's committed batches (the duplicate check is the caller's,
    over `Sink.table_rows`)."""

    uri: str
    records: tuple[BatchRecord, ...]
    violations: tuple[Violation, ...]
    data_files: int
    notes: tuple[str, ...] = field(default_factory=tuple)


def owed_nothing(
    repartition_batches: Callable[[list[int]], dict[int, tuple[str | None, str | None]]],
    unlogged: list[int],
    notes: list[str],
    owed: str,
) -> set[int]:
    """The batches among `unlogged` that Spark's offline repartition (4.2+) committed, each noted: it runs no query,
    reads no input and writes no output, so the sink owes it nothing."""
    found = repartition_batches(unlogged)
    for batch, (old, new) in sorted(found.items()):
        notes.append(
            f"batch {batch} is Spark's offline state repartition ({old} -> {new} partitions): it read no input and "
            f"wrote no output, {owed}"
        )
    return set(found)


# A sink's columns that hold times: compared as instants, whatever type a reader gives them.
TIME_COLUMNS = ("windowStart", "windowEnd", "sessionStart", "sessionEnd")


def repeated_keys(table: Any, columns: Sequence[str]) -> tuple[int, int, list[str]]:
    """(rows, repeated rows, example keys) of a pyarrow table projected on columns: audit's duplicate check and a
    recovery's check of what it wrote count the same way. A time column is compared as an instant (a reader's
    timestamp and a Hive folder's string of the same time are one value); a value that is no time (a
    `windowStart=backup` folder a plain reader picks up) stays as it is."""
    import pandas as pd

    rows = int(table.num_rows)
    if not columns:
        return rows, 0, []
    data = pd.DataFrame({c: table.column(c).to_pylist() for c in columns})
    for column in columns:
        if column in TIME_COLUMNS:
            times = pd.to_datetime(data[column], utc=True, errors="coerce")
            data[column] = times.map(lambda t: t.isoformat() if not pd.isna(t) else None).fillna(
                data[column].astype(str)
            )
    data = data.astype(str)
    repeated = data[data.duplicated(keep=False)].drop_duplicates()
    examples = [", ".join(row) for row in repeated.head(MAX_LISTED).itertuples(index=False)]
    return rows, int(data.duplicated().sum()), examples
