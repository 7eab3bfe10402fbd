"""Checkpoint-mode advice from a progress log: how much batch time goes to committing state, and which store fits."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tidemark.config.model import StateStoreKind
from tidemark.findings import Finding, Severity
from tidemark.formats import BatchProgress, StateOperatorProgress
from tidemark.sizing.memory import MemoryConf, MemoryLoad, layout_for, per_executor_usage
from tidemark.sizing.stores import StoreComparison, compare_stores, store_findings, store_runs

# Above this share of batch time spent committing state, the commit is worth taking off the critical path.
COMMIT_SHARE_HIGH = 0.25
# HDFS-backed state above this share of an executor's execution memory crowds out shuffle and sort.
STATE_MEMORY_DOMINATES = 0.5


@dataclass(frozen=True)
class CheckpointAdvice:
    """The whole answer of `tidemark plan checkpoint`."""

    log: str
    batches_analysed: int
    state_store: StateStoreKind | None
    changelog_checkpointing: bool | None
    task_slots: int | None
    mean_batch_ms: float
    mean_commit_ms: float
    commit_share: float
    median_commit_share: float
    expected_batch_ms_without_commit: float
    peak_state_memory_bytes: int
    state_memory_share: float
    findings: tuple[Finding, ...]
    recommendation: str
    store_comparisons: tuple[StoreComparison, ...] = ()  # RocksDB runs against HDFS-backed runs of the log


def commit_wall_ms(op: StateOperatorProgress, task_slots: int | None) -> float:
    """The wall-clock time one operator spent committing: commitTimeMs is summed over its tasks, which run in waves."""
    tasks = op.num_shuffle_partitions or op.num_state_store_instances or 1
    parallel = min(tasks, task_slots) if task_slots else tasks
    return op.commit_time_ms / parallel


def batch_commit_ms(batch: BatchProgress, task_slots: int | None) -> float:
    """Commit wall time of a batch: stateful operators run in separate stages, one after the other."""
    return sum(commit_wall_ms(op, task_slots) for op in batch.state_operators)


def analysed_batches(progress: Sequence[BatchProgress]) -> list[BatchProgress]:
    """Stateful batches with a duration, without each run's first batch (planning and JVM warm-up) when others exist."""
    stateful = [p for p in progress if p.state_operators and p.batch_duration_ms > 0]
    seen: set[str] = set()
    rest: list[BatchProgress] = []
    for batch in stateful:
        if batch.run_id not in seen:
            seen.add(batch.run_id)
            continue
        rest.append(batch)
    return rest or stateful


def detect_changelog(progress: Sequence[BatchProgress]) -> bool | None:
    """Whether RocksDB changelog checkpointing was on, from the commit latencies RocksDB reports."""
    snapshot_at_commit = False
    for batch in progress:
        for op in batch.state_operators:
            metrics = op.custom_metrics
            # With changelog on, a commit writes a changelog file; without, it builds and uploads a snapshot.
            if metrics.get("rocksdbChangeLogWriterCommitLatencyMs", 0) > 0:
                return True
            if (
                metrics.get("rocksdbSaveZipFilesLatencyMs", 0) > 0
                or metrics.get("rocksdbCommitCheckpointLatency", 0) > 0
            ):
                snapshot_at_commit = True
    return False if snapshot_at_commit else None


def advise_checkpoint(
    progress: Sequence[BatchProgress],
    log: str,
    conf: MemoryConf,
    state_store: StateStoreKind | None = None,
    changelog: bool | None = None,
    task_slots: int | None = None,
) -> CheckpointAdvice:
    """Measure the commit share and the state's weight, and say which checkpoint mode fits."""
    batches = analysed_batches(progress)
    durations = [float(b.batch_duration_ms) for b in batches]
    commits = [batch_commit_ms(b, task_slots) for b in batches]
    total_ms = sum(durations)
    share = sum(commits) / total_ms if total_ms else 0.0
    shares = [c / d for c, d in zip(commits, durations, strict=True) if d]
    mean_batch = statistics.fmean(durations) if durations else 0.0
    mean_commit = statistics.fmean(commits) if commits else 0.0
    peak_state = max((b.state_memory_bytes for b in progress), default=0)
    store = state_store or conf.state_store
    usage = per_executor_usage(
        replace(conf, state_store=StateStoreKind.HDFS),
        MemoryLoad(state_bytes=peak_state),
        layout_for(conf),
    )
    state_share = usage.utilization
    findings: list[Finding] = []
    using_changelog = store is StateStoreKind.ROCKSDB and bool(changelog)
    if share >= COMMIT_SHARE_HIGH and not using_changelog:
        findings.append(
            Finding(
                code="COMMIT_SHARE_HIGH",
                severity=Severity.WARNING,
                message=(
                    f"committing state takes {share:.0%} of batch time ({mean_commit:.0f} of {mean_batch:.0f} ms "
                    f"per batch on average, over {len(batches)} batches)"
                ),
                fix=(
                    "use RocksDB with changelog checkpointing (checkpoint.state_store = 'rocksdb', "
                    "checkpoint.changelog = true): commits upload only the changes and snapshots move to the "
                    f"background; expect about {mean_batch - mean_commit:.0f} ms per batch"
                ),
            )
        )
    elif share >= COMMIT_SHARE_HIGH:
        findings.append(
            Finding(
                code="COMMIT_SHARE_HIGH_WITH_CHANGELOG",
                severity=Severity.WARNING,
                message=f"committing state takes {share:.0%} of batch time although changelog checkpointing is on",
                fix=(
                    "fewer state partitions (spark.sql.shuffle.partitions before the first batch) or a longer "
                    "trigger interval make each commit carry more rows"
                ),
            )
        )
    if store is StateStoreKind.HDFS and state_share >= STATE_MEMORY_DOMINATES:
        findings.append(
            Finding(
                code="STATE_MEMORY_DOMINATES",
                severity=Severity.WARNING,
                message=(
                    f"HDFS-backed state of {peak_state} bytes fills {state_share:.0%} of each executor's execution "
                    "memory, on the JVM heap where the memory manager does not see it"
                ),
                fix="use RocksDB (checkpoint.state_store = 'rocksdb'): state moves off the heap and to local disk",
            )
        )
    comparisons = compare_stores(store_runs(progress))
    findings.extend(store_findings(comparisons))
    if not any(f.severity is Severity.WARNING for f in findings):
        findings.append(
            Finding(
                code="CHECKPOINT_MODE_OK",
                severity=Severity.INFO,
                message=f"committing state takes {share:.0%} of batch time; state fills {state_share:.0%} of execution",
                fix="nothing to change",
            )
        )
    return CheckpointAdvice(
        log=log,
        batches_analysed=len(batches),
        state_store=store,
        changelog_checkpointing=changelog,
        task_slots=task_slots,
        mean_batch_ms=mean_batch,
        mean_commit_ms=mean_commit,
        commit_share=share,
        median_commit_share=statistics.median(shares) if shares else 0.0,
        expected_batch_ms_without_commit=mean_batch - mean_commit,
        peak_state_memory_bytes=peak_state,
        state_memory_share=state_share,
        findings=tuple(findings),
        recommendation=_summary(findings),
        store_comparisons=tuple(comparisons),
    )


def _summary(findings: Sequence[Finding]) -> str:
    codes = {f.code for f in findings}
    if "COMMIT_SHARE_HIGH" in codes:
        return "rocksdb+changelog"
    if "STATE_MEMORY_DOMINATES" in codes:
        return "rocksdb"
    return "keep"
