"""`tidemark audit CONFIG`: an exactly-once ledger of the sink, and the violations a raw reader would suffer.

For every committed batch: what it read (source files or Kafka offsets), the sink files it added (Spark's
`_spark_metadata` and tidemark's own ledger, which retention cannot erase), the rows it wrote. Then:
- no (key, window) appears twice in what a plain Parquet reader sees (every data file on storage);
- no file belongs to two batches;
- no committed batch lacks its sink log entry;
- no sink file is outside every batch (a half-written batch, a copied file), and no listed file is missing.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tidemark.compat import StrEnum
from tidemark.config import AggregationKind, TidemarkConfig
from tidemark.errors import CheckpointError
from tidemark.formats import (
    Checkpoint,
    LedgerEntry,
    entry_rel,
    read_ledger,
    read_recovery_marker,
    read_sink_log,
    sink_batch_files,
    sink_data_files,
    sink_log_names,
    sink_log_skipped_batches,
)
from tidemark.recovery.archive import pipeline_locations
from tidemark.sinks import TableOutput, Tool, sink_of
from tidemark.sources import source_of
from tidemark.steps import step
from tidemark.storage import Storage, open_storage

MAX_LISTED = 20  # files or keys named per violation; the count says how many there are


class ViolationKind(StrEnum):
    """What breaks exactly-once."""

    DUPLICATE_KEY = "duplicate-key"  # a (key, window) twice for a plain Parquet reader (a table's: its readers)
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
    """One committed batch, as the checkpoint, the sink log and the ledger tell it."""

    batch: int
    source: tuple[str, ...]  # files read, or the Kafka offsets the batch ended at
    sink_files: tuple[str, ...]
    rows: int | None  # rows written (ledger), None when not recorded
    in_sink_log: bool
    in_ledger: bool


@dataclass(frozen=True)
class AuditResult:
    """The ledger of every committed batch and every violation found."""

    checkpoint: str
    sink: str
    batches: tuple[BatchRecord, ...]
    data_files: int
    rows_on_storage: int
    key_columns: tuple[str, ...]
    violations: tuple[Violation, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True when nothing breaks exactly-once."""
        return not self.violations


def key_columns(config: TidemarkConfig) -> tuple[str, ...]:
    """The columns that identify one result row: the key and the window or session bounds."""
    key = tuple(config.aggregation.key)
    if config.aggregation.kind is AggregationKind.WINDOW:
        return (*key, "windowStart", "windowEnd")
    if config.aggregation.kind is AggregationKind.SESSION:
        return (*key, "sessionStart", "sessionEnd")
    return ()


def _duplicates(sink: Storage, columns: tuple[str, ...], files: list[str] | None = None) -> tuple[int, int, list[str]]:
    """(rows, repeated rows, example keys) as a plain Parquet reader sees the sink (every data file, Hive paths),
    or, given files (a table's live ones, below the sink), as the table's readers see it."""
    import pyarrow.dataset as ds

    filesystem, base = sink.arrow()
    if files is not None and not files:
        return 0, 0, []
    source: Any = [f"{base}/{f}" for f in files] if files is not None else base
    dataset = ds.dataset(source, format="parquet", partitioning="hive", filesystem=filesystem, partition_base_dir=base)
    rows = dataset.count_rows()
    if not columns or rows == 0:
        return rows, 0, []
    frame: Any = dataset.to_table(columns=list(columns)).to_pandas().astype(str)
    repeated = frame[frame.duplicated(keep=False)].drop_duplicates()
    examples = [", ".join(row) for row in repeated.head(MAX_LISTED).itertuples(index=False)]
    return rows, int(frame.duplicated().sum()), examples


def _repartition_batches(checkpoint: Checkpoint, unlogged: list[int], notes: list[str], owed: str) -> set[int]:
    """The batches among `unlogged` that Spark's offline repartition (4.2+) committed, each noted: it runs no query,
    reads no input and writes no output, so the sink owes it nothing."""
    found = checkpoint.repartition_batches(unlogged)
    for batch, (old, new) in sorted(found.items()):
        notes.append(
            f"batch {batch} is Spark's offline state repartition ({old} -> {new} partitions): it read no input and "
            f"wrote no output, {owed}"
        )
    return set(found)


def audit_sink(config: TidemarkConfig) -> AuditResult:
    """Build the per-batch ledger and check exactly-once; raise only when the checkpoint cannot be read."""
    from tidemark.pipeline.sink_check import require_matching_sink

    paths = pipeline_locations(config, Tool.AUDIT)
    checkpoint = Checkpoint.open(paths.checkpoint)
    checkpoint.require()
    table = sink_of(config).table_output(checkpoint.store)
    if table is not None:
        return audit_table(config, checkpoint, table)
    require_matching_sink(config, "tidemark audit", "point the config at the sink its query writes")
    sink = open_storage(paths.sink)
    commits = checkpoint.commit_batches()
    names = sink_log_names(sink)
    # Spark's offline repartition batches the log has no file for, asked once: the log is read past them, and
    # those it skips over are a violation below.
    unlisted = checkpoint.repartition_batches([b for b in commits if b not in names])
    log = read_sink_log(sink, empty=lambda _absent: unlisted)
    ledger: dict[int, LedgerEntry] = read_ledger(checkpoint.store)
    inputs = source_of(config).committed_inputs(checkpoint, commits)
    present = {e.rel: e for e in sink_data_files(sink)}
    violations: list[Violation] = []
    notes: list[str] = []
    owners: dict[str, set[int]] = defaultdict(set)
    records: list[BatchRecord] = []
    latest_log = max(names) if names else None
    with step("checking committed batches against the sink", total=len(commits)) as advance:
        for batch in commits:
            advance(1)
            recorded = ledger.get(batch)
            from_log = sink_batch_files(sink, batch) if batch in names else None
            added = set(from_log or []) | {rel for rel, _ in (recorded.files if recorded else ())}
            for rel in added:
                owners[rel].add(batch)
            covered = latest_log is not None and batch <= latest_log
            records.append(
                BatchRecord(
                    batch=batch,
                    source=inputs[batch].names if batch in inputs else (),
                    sink_files=tuple(sorted(added)),
                    rows=recorded.rows if recorded else None,
                    in_sink_log=covered,
                    in_ledger=recorded is not None,
                )
            )
            if recorded is not None and recorded.rows is not None and from_log is not None:
                on_disk = _rows(sink, [f for f in from_log if f in present])
                if on_disk is not None and on_disk != recorded.rows and all(f in present for f in from_log):
                    violations.append(
                        Violation(
                            ViolationKind.ROWS_DIFFER,
                            f"batch {batch} wrote {recorded.rows} rows (progress) but its files hold {on_disk}",
                            (batch,),
                            tuple(sorted(from_log))[:MAX_LISTED],
                            len(from_log),
                        )
                    )
    unlogged = [r.batch for r in records if not r.in_sink_log and not r.sink_files]
    repartitioned = _repartition_batches(checkpoint, unlogged, notes, "so the sink log has no entry for it")
    missing_entries = [r.batch for r in records if not r.in_sink_log and r.batch not in repartitioned]
    if missing_entries:
        violations.append(
            Violation(
                ViolationKind.BATCH_WITHOUT_SINK_ENTRY,
                f"{len(missing_entries)} committed batch(es) have no entry in {sink.uri('_spark_metadata')}: "
                "Spark readers will not see their output",
                tuple(missing_entries[:MAX_LISTED]),
                count=len(missing_entries),
            )
        )
    gaps = sink_log_skipped_batches(names, log.base_compact, unlisted)
    if gaps:
        entries = ", ".join(sink.uri(f"_spark_metadata/{b}") for b in gaps[:MAX_LISTED])
        violations.append(
            Violation(
                ViolationKind.SINK_LOG_GAP,
                f"Spark's offline state repartition committed batch(es) {', '.join(map(str, gaps[:MAX_LISTED]))} "
                "(no input, no output) and the sink log has no file for them while later batches have one: every "
                f"Spark reader of the sink fails; with the query stopped, write the single line 'v1' into {entries}",
                tuple(gaps[:MAX_LISTED]),
                count=len(gaps),
            )
        )
    shared = {rel: b for rel, b in owners.items() if len(b) > 1}
    if shared:
        violations.append(
            Violation(
                ViolationKind.FILE_IN_TWO_BATCHES,
                f"{len(shared)} file(s) are claimed by more than one batch",
                tuple(sorted({b for bs in shared.values() for b in bs}))[:MAX_LISTED],
                tuple(sorted(shared))[:MAX_LISTED],
                len(shared),
            )
        )
    known = set(log.files) | set(owners) | _marker_files(paths)
    outside = sorted(rel for rel in present if rel not in known)
    if outside:
        violations.append(
            Violation(
                ViolationKind.FILE_OUTSIDE_EVERY_BATCH,
                f"{len(outside)} data file(s) belong to no committed batch (a half-written batch, or a copy): "
                "plain Parquet readers count them; `tidemark run` moves a killed batch's files aside at start",
                files=tuple(outside[:MAX_LISTED]),
                count=len(outside),
            )
        )
    gone = sorted(rel for rel in log.files if rel not in present)
    if gone:
        violations.append(
            Violation(
                ViolationKind.LISTED_FILE_MISSING,
                f"{len(gone)} file(s) the sink log lists are gone from storage: Spark readers fail on them",
                files=tuple(gone[:MAX_LISTED]),
                count=len(gone),
            )
        )
    columns = key_columns(config)
    rows, duplicated, examples = _duplicates(sink, columns) if present else (0, 0, [])
    if duplicated:
        violations.append(
            Violation(
                ViolationKind.DUPLICATE_KEY,
                f"{duplicated} row(s) repeat a ({', '.join(columns)}) a plain Parquet reader already sees",
                files=tuple(examples),
                count=duplicated,
            )
        )
    if not columns:
        notes.append("custom per-key output has no (key, window) identity: the duplicate check is skipped")
    without_ledger = [r.batch for r in records if not r.in_ledger]
    if without_ledger:
        notes.append(
            f"{len(without_ledger)} committed batch(es) have no ledger record (written before tidemark kept one, or a "
            "crash between commit and record): their files are known from the sink log only"
        )
    if log.outside:
        notes.append(f"{len(log.outside)} sink log entries name files outside {sink.uri()} (a moved or copied sink)")
    return AuditResult(
        checkpoint=paths.checkpoint.uri,
        sink=paths.sink.uri,
        batches=tuple(records),
        data_files=len(present),
        rows_on_storage=rows,
        key_columns=columns,
        violations=tuple(violations),
        notes=tuple(notes),
    )


def audit_table(config: TidemarkConfig, checkpoint: Checkpoint, table: TableOutput) -> AuditResult:
    """The audit of a table sink (Delta): each committed batch's commit, read from the table's own log.

    A batch is in the table when a commit carries its transaction version; two commits for one batch, a
    committed batch with no commit (where the log still reaches back to it) and a (key, window) twice among the
    files the table's readers read are violations. Other writers' commits (another app id, OPTIMIZE) are counted
    apart, never as duplicates.
    """
    commits = checkpoint.commit_batches()
    inputs = source_of(config).committed_inputs(checkpoint, commits)
    by_batch: dict[int, list[Any]] = defaultdict(list)
    for commit in table.commits:
        by_batch[commit.batch].append(commit)
    violations: list[Violation] = []
    notes = list(table.notes)
    records = []
    for batch in commits:
        made = by_batch.get(batch, [])
        files = tuple(sorted({f for c in made for f in c.files}))
        rows = [c.rows for c in made]
        records.append(
            BatchRecord(
                batch=batch,
                source=inputs[batch].names if batch in inputs else (),
                sink_files=files,
                rows=None if not made or any(r is None for r in rows) else sum(r for r in rows if r is not None),
                in_sink_log=bool(made),
                in_ledger=False,
            )
        )
    twice = sorted(b for b, made in by_batch.items() if len(made) > 1)
    if twice:
        violations.append(
            Violation(
                ViolationKind.BATCH_WRITTEN_TWICE,
                f"{len(twice)} batch(es) have more than one commit carrying their transaction in {table.uri}",
                tuple(twice[:MAX_LISTED]),
                count=len(twice),
            )
        )
    # Every batch commits to the table, rows or none (a re-run of one whose commit landed keeps that commit), but
    # for Spark's offline repartition batch, which runs no query.
    unlogged = [r.batch for r in records if not r.in_sink_log]
    repartitioned = _repartition_batches(checkpoint, unlogged, notes, "so no commit is owed")
    missing = [
        r.batch for r in records if not r.in_sink_log and table.checks_batch(r.batch) and r.batch not in repartitioned
    ]
    if missing:
        violations.append(
            Violation(
                ViolationKind.BATCH_WITHOUT_SINK_ENTRY,
                f"{len(missing)} committed batch(es) have no commit in {table.uri}: their output is not in the table",
                tuple(missing[:MAX_LISTED]),
                count=len(missing),
            )
        )
    columns = key_columns(config)
    rows_read, duplicated, examples = table_duplicates(config, columns)
    if duplicated:
        violations.append(
            Violation(
                ViolationKind.DUPLICATE_KEY,
                f"{duplicated} row(s) repeat a ({', '.join(columns)}) the table's readers already see",
                files=tuple(examples),
                count=duplicated,
            )
        )
    if table.other_commits:
        notes.append(
            f"{table.other_commits} commit(s) by other writers ({', '.join(table.other_writers[:5])}) are not this "
            "pipeline's batches: not counted"
        )
    if not columns:
        notes.append("custom per-key output has no (key, window) identity: the duplicate check is skipped")
    return AuditResult(
        checkpoint=checkpoint.store.uri(),
        sink=table.uri,
        batches=tuple(records),
        data_files=len(table.live_files),
        rows_on_storage=rows_read,
        key_columns=columns,
        violations=tuple(violations),
        notes=tuple(notes),
    )


_TIME_COLUMNS = ("windowStart", "windowEnd", "sessionStart", "sessionEnd")


def table_duplicates(config: TidemarkConfig, columns: tuple[str, ...]) -> tuple[int, int, list[str]]:
    """(rows, repeated rows, example keys) among a table sink's rows as its readers read them (the sink's own
    reader: deletion vectors applied, partition values from its log, never from folder names)."""
    import pandas as pd

    frame: Any = sink_of(config).table_rows(list(columns) or [])
    if frame is None:
        return 0, 0, []
    rows = int(frame.num_rows)
    if not columns:
        return rows, 0, []
    data = pd.DataFrame({c: frame.column(c).to_pylist() for c in columns})
    for column in columns:
        if column in _TIME_COLUMNS:
            data[column] = pd.to_datetime(data[column], utc=True).map(lambda t: t.isoformat())
    data = data.astype(str)
    repeated = data[data.duplicated(keep=False)].drop_duplicates()
    examples = [", ".join(row) for row in repeated.head(MAX_LISTED).itertuples(index=False)]
    return rows, int(data.duplicated().sum()), examples


def _rows(sink: Storage, files: list[str]) -> int | None:
    if not files:
        return 0
    import pyarrow.parquet as pq

    filesystem, base = sink.arrow()
    try:
        return int(sum(pq.ParquetFile(f"{base}/{f}", filesystem=filesystem).metadata.num_rows for f in files))
    except (OSError, ValueError) as exc:
        msg = f"cannot read the Parquet footer of a file of {sink.uri()}: {exc}"
        raise CheckpointError(msg) from exc


def _marker_files(paths: Any) -> set[str]:
    marker = read_recovery_marker(paths.checkpoint)
    found: set[str] = set()
    for line in marker.entries if marker else ():
        rel = entry_rel(paths.sink, str(json.loads(line)["path"]))
        if rel is not None:
            found.add(rel)
    return found
