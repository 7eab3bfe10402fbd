"""A Parquet sink's audit: each committed batch's files from Spark's file sink log and tidemark's ledger (which
retention cannot erase), files outside every batch, listed files gone, log gaps, row counts against the ledger."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from tidemark.errors import CheckpointError
from tidemark.formats import Checkpoint, read_recovery_marker
from tidemark.sinks.audit import MAX_LISTED, BatchRecord, SinkAudit, Violation, ViolationKind, owed_nothing
from tidemark.sinks.parquet.ledger import batch_files, read_ledger
from tidemark.sinks.parquet.log import SINK_LOG_DIR, data_files, log_names, marker_paths, read_log, skipped_batches
from tidemark.steps import step
from tidemark.storage import Storage


def audit_files(checkpoint: Checkpoint, sink: Storage, inputs: Mapping[int, tuple[str, ...]]) -> SinkAudit:
    """The per-batch record of a Parquet sink and what breaks exactly-once in its files and log."""
    commits = checkpoint.commit_batches()
    names = log_names(sink)
    # Spark's offline repartition batches the log has no file for, asked once: the log is read past them, and
    # those it skips over are a violation below.
    unlisted = checkpoint.repartition_batches([b for b in commits if b not in names])
    log = read_log(sink, empty=lambda _absent: unlisted)
    ledger = read_ledger(checkpoint.store)
    present = {e.rel: e for e in data_files(sink)}
    violations: list[Violation] = []
    notes: list[str] = []
    owners: dict[str, set[int]] = defaultdict(set)
    records: list[BatchRecord] = []
    latest_log = max(names) if names else None
    with step("checking committed batches against the sink", total=len(commits)) as advance:
        for batch in commits:
            advance(1)
            recorded = ledger.get(batch)
            from_log = batch_files(sink, batch) if batch in names else None
            added = set(from_log or []) | {rel for rel, _ in (recorded.files if recorded else ())}
            for rel in added:
                owners[rel].add(batch)
            records.append(
                BatchRecord(
                    batch=batch,
                    source=inputs.get(batch, ()),
                    sink_files=tuple(sorted(added)),
                    rows=recorded.rows if recorded else None,
                    in_sink_log=latest_log is not None and batch <= latest_log,
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
    repartitioned = owed_nothing(checkpoint.repartition_batches, unlogged, notes, "so the sink log has no entry for it")
    missing_entries = [r.batch for r in records if not r.in_sink_log and r.batch not in repartitioned]
    if missing_entries:
        violations.append(
            Violation(
                ViolationKind.BATCH_WITHOUT_SINK_ENTRY,
                f"{len(missing_entries)} committed batch(es) have no entry in {sink.uri(SINK_LOG_DIR)}: "
                "Spark readers will not see their output",
                tuple(missing_entries[:MAX_LISTED]),
                count=len(missing_entries),
            )
        )
    gaps = skipped_batches(names, log.base_compact, unlisted)
    if gaps:
        entries = ", ".join(sink.uri(f"{SINK_LOG_DIR}/{b}") for b in gaps[:MAX_LISTED])
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
    known = set(log.files) | set(owners) | marker_paths(sink.location, read_recovery_marker(checkpoint.store.location))
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
    without_ledger = [r.batch for r in records if not r.in_ledger]
    if without_ledger:
        notes.append(
            f"{len(without_ledger)} committed batch(es) have no ledger record (written before tidemark kept one, or a "
            "crash between commit and record): their files are known from the sink log only"
        )
    if log.outside:
        notes.append(f"{len(log.outside)} sink log entries name files outside {sink.uri()} (a moved or copied sink)")
    return SinkAudit(sink.uri(), tuple(records), tuple(violations), len(present), tuple(notes))


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
