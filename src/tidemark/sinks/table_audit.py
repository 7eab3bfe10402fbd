"""The audit of a table sink that keeps its own log (Delta, Iceberg): each committed batch's commit, found by the
transaction the sink wrote into it (sinks/base.py TableOutput), once."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from tidemark.formats import Checkpoint
from tidemark.sinks.audit import MAX_LISTED, BatchRecord, SinkAudit, Violation, ViolationKind, owed_nothing
from tidemark.sinks.base import TableCommit, TableOutput


def audit_commits(
    checkpoint: Checkpoint, table: TableOutput, inputs: Mapping[int, tuple[str, ...]], unit: str = "commit"
) -> SinkAudit:
    """A batch is in the table when a commit (unit: what the table calls one, Delta's commit, Iceberg's snapshot)
    carries its transaction version; two for one batch and a committed batch with none (where the table's history
    still reaches back to it) are violations. Other writers' commits (another app id, a compaction) are counted
    apart, never as duplicates."""
    commits = checkpoint.commit_batches()
    by_batch: dict[int, list[TableCommit]] = defaultdict(list)
    for commit in table.commits:
        by_batch[commit.batch].append(commit)
    violations: list[Violation] = []
    notes = list(table.notes)
    records = []
    for batch in commits:
        made = by_batch.get(batch, [])
        rows = [c.rows for c in made]
        records.append(
            BatchRecord(
                batch=batch,
                source=inputs.get(batch, ()),
                sink_files=tuple(sorted({f for c in made for f in c.files})),
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
                f"{len(twice)} batch(es) have more than one {unit} carrying their transaction in {table.uri}",
                tuple(twice[:MAX_LISTED]),
                count=len(twice),
            )
        )
    # Every batch commits to the table, rows or none (a re-run of one whose commit landed keeps that commit; an
    # empty batch appends an empty snapshot), but for Spark's offline repartition batch, which runs no query.
    unlogged = [r.batch for r in records if not r.in_sink_log]
    repartitioned = owed_nothing(checkpoint.repartition_batches, unlogged, notes, f"so no {unit} is owed")
    missing = [
        r.batch for r in records if not r.in_sink_log and table.checks_batch(r.batch) and r.batch not in repartitioned
    ]
    if missing:
        violations.append(
            Violation(
                ViolationKind.BATCH_WITHOUT_SINK_ENTRY,
                f"{len(missing)} committed batch(es) have no {unit} in {table.uri}: their output is not in the table",
                tuple(missing[:MAX_LISTED]),
                count=len(missing),
            )
        )
    if table.other_commits:
        notes.append(
            f"{table.other_commits} {unit}(s) by other writers ({', '.join(table.other_writers[:5])}) are not this "
            "pipeline's batches: not counted"
        )
    return SinkAudit(table.uri, tuple(records), tuple(violations), len(table.live_files), tuple(notes))
