"""`tidemark audit CONFIG`: an exactly-once ledger of the sink, and the violations its readers would suffer.

For every committed batch: what it read (source files or Kafka offsets), what the sink's own records say it
wrote (a file sink's log and tidemark's ledger, a table's commits: the sink's package reads them,
`Sink.audit`), the rows it wrote. Then no (key, window) appears twice in what the sink's readers read
(`Sink.table_rows`: every data file for a plain Parquet reader, a table's snapshot for a table's readers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidemark.config import AggregationKind, TidemarkConfig
from tidemark.context import PipelineContext
from tidemark.formats import Checkpoint
from tidemark.sinks import Sink, Tool
from tidemark.sinks.audit import BatchRecord, Violation, ViolationKind, repeated_keys


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


def audit_sink(config: TidemarkConfig) -> AuditResult:
    """Build the per-batch ledger and check exactly-once; raise only when the checkpoint cannot be read."""
    from tidemark.pipeline.sink_check import require_matching_sink

    pipeline = PipelineContext.of(config)
    paths = pipeline.locations(Tool.AUDIT)
    checkpoint = Checkpoint.open(paths.checkpoint)
    checkpoint.require()
    require_matching_sink(pipeline, "tidemark audit", "point the config at the sink its query writes")
    target = pipeline.sink
    inputs = pipeline.source.committed_inputs(checkpoint, checkpoint.commit_batches())
    found = target.audit(checkpoint, {batch: read.names for batch, read in inputs.items()})
    violations = list(found.violations)
    notes = list(found.notes)
    columns = key_columns(config)
    rows, duplicated, examples = table_duplicates(target, columns)
    if duplicated:
        violations.append(
            Violation(
                ViolationKind.DUPLICATE_KEY,
                f"{duplicated} row(s) repeat a ({', '.join(columns)}) {target.readers} already see(s)",
                files=tuple(examples),
                count=duplicated,
            )
        )
    if not columns:
        notes.append("custom per-key output has no (key, window) identity: the duplicate check is skipped")
    return AuditResult(
        checkpoint=paths.checkpoint.uri,
        sink=found.uri,
        batches=found.records,
        data_files=found.data_files,
        rows_on_storage=rows,
        key_columns=columns,
        violations=tuple(violations),
        notes=tuple(notes),
    )


def table_duplicates(sink: Sink, columns: tuple[str, ...]) -> tuple[int, int, list[str]]:
    """(rows, repeated rows, example keys) among the sink's rows as its readers read them (the sink's own reader:
    every data file for a plain Parquet reader; a table's snapshot, deletion vectors applied, partition values from
    its log, never from folder names)."""
    return repeated_keys(sink.table_rows(list(columns)), columns)
