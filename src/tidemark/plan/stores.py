"""RocksDB against the HDFS-backed store at the same state size, from measured runs of both in a progress log.

A progress log holds runs (one run id each). Runs of the two providers whose state holds about the same number
of rows are compared on their median batch time: where RocksDB is slower, `plan checkpoint` says so with the
numbers. `benchmarks/state_store.py --log FILE` writes such a log for a range of key counts; two runs of a
pipeline on the same data, one per `[checkpoint] state_store`, do as well.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tidemark.config.model import StateStoreKind
from tidemark.findings import Finding, Severity
from tidemark.monitor.progress import BatchProgress
from tidemark.plan.load import detect_state_store
from tidemark.sizes import format_size

# Runs compare when their state sizes are within this factor of each other.
SAME_SIZE = 1.25


@dataclass(frozen=True)
class StoreRun:
    """One run of a stateful query: its provider, its state size and its batch times (first batch left out)."""

    run_id: str
    name: str | None  # the query name
    store: StateStoreKind
    state_rows: int
    batches: int
    median_batch_ms: float
    median_updates_ms: float
    median_commit_ms: float
    peak_state_memory_bytes: int


@dataclass(frozen=True)
class StoreComparison:
    """A RocksDB run against the HDFS-backed run of the closest state size."""

    state_rows: int
    rocksdb: StoreRun
    hdfs: StoreRun
    ratio: float  # RocksDB's median batch time over the HDFS-backed store's


def _state_rows(batch: BatchProgress) -> int:
    # With trackTotalNumberOfRows off RocksDB reports 0 rows in state; the rows a batch updated are then the
    # best lower bound the log has.
    return sum(max(op.num_rows_total, op.num_rows_updated) for op in batch.state_operators)


def store_runs(progress: Sequence[BatchProgress]) -> list[StoreRun]:
    """Group a log's stateful batches by run; runs whose provider cannot be told are left out."""
    by_run: dict[str, list[BatchProgress]] = {}
    for batch in progress:
        if batch.state_operators and batch.batch_duration_ms > 0:
            by_run.setdefault(batch.run_id, []).append(batch)
    runs: list[StoreRun] = []
    for run_id, batches in by_run.items():
        store = detect_state_store(batches)
        steady = batches[1:] or batches
        if store is None:
            continue
        runs.append(
            StoreRun(
                run_id=run_id,
                name=batches[0].name,
                store=store,
                state_rows=int(statistics.median(_state_rows(b) for b in steady)),
                batches=len(steady),
                median_batch_ms=statistics.median(float(b.batch_duration_ms) for b in steady),
                median_updates_ms=statistics.median(
                    float(sum(op.all_updates_time_ms for op in b.state_operators)) for b in steady
                ),
                median_commit_ms=statistics.median(
                    float(sum(op.commit_time_ms for op in b.state_operators)) for b in steady
                ),
                peak_state_memory_bytes=max(b.state_memory_bytes for b in batches),
            )
        )
    return runs


def _same_size(a: int, b: int) -> bool:
    return max(a, b) <= SAME_SIZE * min(a, b)


def compare_stores(runs: Sequence[StoreRun]) -> list[StoreComparison]:
    """Pair every RocksDB run with the HDFS-backed run of the closest state size (within SAME_SIZE)."""
    hdfs = [r for r in runs if r.store is StateStoreKind.HDFS and r.state_rows > 0]
    pairs: list[StoreComparison] = []
    for rocksdb in (r for r in runs if r.store is StateStoreKind.ROCKSDB and r.state_rows > 0):
        close = [h for h in hdfs if _same_size(h.state_rows, rocksdb.state_rows)]
        if close:
            best = min(close, key=lambda h: abs(h.state_rows - rocksdb.state_rows))
            ratio = rocksdb.median_batch_ms / best.median_batch_ms if best.median_batch_ms else 0.0
            pairs.append(StoreComparison(rocksdb.state_rows, rocksdb, best, ratio))
    return sorted(pairs, key=lambda c: (c.state_rows, c.rocksdb.run_id))


def _label(run: StoreRun) -> str:
    return f"{run.name} ({run.run_id})" if run.name else run.run_id


def store_findings(comparisons: Sequence[StoreComparison]) -> list[Finding]:
    """ROCKSDB_SLOWER_THAN_HDFS where RocksDB lost, with the numbers; one ROCKSDB_NOT_SLOWER line otherwise."""
    findings: list[Finding] = []
    for c in comparisons:
        figures = (
            f"at {c.state_rows:,} state rows RocksDB's median batch took {c.rocksdb.median_batch_ms:,.0f} ms, "
            f"{c.ratio:.2f}x the HDFS-backed store's {c.hdfs.median_batch_ms:,.0f} ms (state updates "
            f"{c.rocksdb.median_updates_ms:,.0f} vs {c.hdfs.median_updates_ms:,.0f} ms, commits "
            f"{c.rocksdb.median_commit_ms:,.0f} vs {c.hdfs.median_commit_ms:,.0f} ms summed over tasks; runs "
            f"{_label(c.rocksdb)} and {_label(c.hdfs)})"
        )
        if c.ratio > 1.0:
            findings.append(
                Finding(
                    code="ROCKSDB_SLOWER_THAN_HDFS",
                    severity=Severity.WARNING,
                    message=f"RocksDB cannot win at this size: {figures}",
                    fix=(
                        "checkpoint.state_store = 'hdfs' is faster at this size if the state fits the executor heap "
                        f"with room (it measured {format_size(c.hdfs.peak_state_memory_bytes)} on the heap here; "
                        "check with tidemark plan memory --state-store hdfs); it keeps every key on the JVM heap "
                        "and a checkpoint's provider cannot change later"
                    ),
                )
            )
        else:
            findings.append(
                Finding(
                    code="ROCKSDB_NOT_SLOWER",
                    severity=Severity.INFO,
                    message=figures,
                    fix="nothing to change: RocksDB is at least as fast and keeps state off the heap",
                )
            )
    return findings
