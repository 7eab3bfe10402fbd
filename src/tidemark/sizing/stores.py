"""RocksDB against the HDFS-backed store at the same state size, from measured runs of both in a progress log.

A progress log holds runs (one run id each). Runs of the two providers whose state holds about the same number
of rows are compared on their median batch time (several runs of one setup, e.g. a benchmark's rounds: the
median over the runs): where RocksDB is slower, `plan checkpoint` says so with the numbers.
`benchmarks/state_store.py --log FILE` writes such a log for a range of key counts; two runs of a pipeline on
the same data, one per `[checkpoint] state_store`, do as well.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tidemark.config.model import StateStoreKind
from tidemark.findings import Finding, Severity
from tidemark.formats import BatchProgress
from tidemark.sizes import format_size
from tidemark.sizing.load import detect_state_store

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
class StoreGroup:
    """Runs of one setup (same provider and query name) at about one state size: medians over the runs."""

    store: StateStoreKind
    name: str | None
    runs: tuple[str, ...]  # run ids
    state_rows: int
    median_batch_ms: float  # median over the runs of each run's median batch
    fastest_run_ms: float
    slowest_run_ms: float
    median_updates_ms: float
    median_commit_ms: float
    peak_state_memory_bytes: int


@dataclass(frozen=True)
class StoreComparison:
    """A RocksDB setup against the HDFS-backed runs at the same state size."""

    state_rows: int
    rocksdb: StoreGroup
    hdfs: StoreGroup
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


def _group(runs: Sequence[StoreRun]) -> StoreGroup:
    medians = [r.median_batch_ms for r in runs]
    return StoreGroup(
        store=runs[0].store,
        name=runs[0].name,
        runs=tuple(r.run_id for r in runs),
        state_rows=int(statistics.median(r.state_rows for r in runs)),
        median_batch_ms=statistics.median(medians),
        fastest_run_ms=min(medians),
        slowest_run_ms=max(medians),
        median_updates_ms=statistics.median(r.median_updates_ms for r in runs),
        median_commit_ms=statistics.median(r.median_commit_ms for r in runs),
        peak_state_memory_bytes=max(r.peak_state_memory_bytes for r in runs),
    )


def _size_classes(runs: Sequence[StoreRun]) -> list[list[StoreRun]]:
    """Runs sorted by state size, cut where a size is more than SAME_SIZE times the first of its class."""
    classes: list[list[StoreRun]] = []
    for run in sorted((r for r in runs if r.state_rows > 0), key=lambda r: r.state_rows):
        if classes and _same_size(classes[-1][0].state_rows, run.state_rows):
            classes[-1].append(run)
        else:
            classes.append([run])
    return classes


def compare_stores(runs: Sequence[StoreRun]) -> list[StoreComparison]:
    """Per state size: every RocksDB setup (runs of one query name) against all HDFS-backed runs of that size."""
    pairs: list[StoreComparison] = []
    for size_class in _size_classes(runs):
        hdfs = [r for r in size_class if r.store is StateStoreKind.HDFS]
        if not hdfs:
            continue
        baseline = _group(hdfs)
        setups: dict[str | None, list[StoreRun]] = {}
        for run in size_class:
            if run.store is StateStoreKind.ROCKSDB:
                setups.setdefault(run.name, []).append(run)
        for group in (_group(r) for r in setups.values()):
            ratio = group.median_batch_ms / baseline.median_batch_ms if baseline.median_batch_ms else 0.0
            pairs.append(StoreComparison(group.state_rows, group, baseline, ratio))
    return pairs


def _label(group: StoreGroup) -> str:
    runs = f"{len(group.runs)} run{'s' if len(group.runs) > 1 else ''}"
    spread = (
        f", {group.fastest_run_ms:,.0f}-{group.slowest_run_ms:,.0f} ms" if len(group.runs) > 1 else f" {group.runs[0]}"
    )
    return f"{group.name or group.store.value}: {runs}{spread}"


def store_findings(comparisons: Sequence[StoreComparison]) -> list[Finding]:
    """ROCKSDB_SLOWER_THAN_HDFS where a RocksDB setup lost, with the numbers; ROCKSDB_NOT_SLOWER otherwise."""
    findings: list[Finding] = []
    for c in comparisons:
        figures = (
            f"at {c.state_rows:,} state rows RocksDB's median batch took {c.rocksdb.median_batch_ms:,.0f} ms, "
            f"{c.ratio:.2f}x the HDFS-backed store's {c.hdfs.median_batch_ms:,.0f} ms (state updates "
            f"{c.rocksdb.median_updates_ms:,.0f} vs {c.hdfs.median_updates_ms:,.0f} ms, commits "
            f"{c.rocksdb.median_commit_ms:,.0f} vs {c.hdfs.median_commit_ms:,.0f} ms summed over tasks; "
            f"{_label(c.rocksdb)}; {_label(c.hdfs)})"
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
