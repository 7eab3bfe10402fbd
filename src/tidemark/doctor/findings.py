"""The checks `checkpoint inspect` runs: each turns what the scan saw into findings with a code and a fix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tidemark.doctor.corruption import RestartPoint, damaged_file_findings, gap_findings, missing_state_findings
from tidemark.doctor.report import FolderCount, OperatorReport
from tidemark.findings import Finding, Severity
from tidemark.formats import (
    CheckpointHealth,
    CheckpointScan,
    CommitEntry,
    FileProblem,
    LogHealth,
    SourceEntryProblem,
    StoreScan,
)
from tidemark.sinks import SinkInspection, SinkLimits
from tidemark.spark.lines import Defect, has_defect, installed_version

PRUNE_HINT = "stop the query and run `tidemark checkpoint prune PATH --keep 100 --apply`"


@dataclass(frozen=True)
class Thresholds:
    """Where a number becomes a finding; the defaults suit Spark's own defaults."""

    max_files: int = 100_000
    max_replay: int = 50  # Spark snapshots every 10 deltas by default (minDeltasForSnapshot)
    max_history: int = 200  # Spark keeps 100 batches by default (minBatchesToRetain)
    max_sink_compact_bytes: int = 100 * 1024**2
    max_sink_files: int = 1_000_000
    # A Delta table with this many active files or more, averaging under delta_small_file_bytes: compact it.
    max_delta_files: int = 1_000
    delta_small_file_bytes: int = 32 * 1024**2

    def sink_limits(self) -> SinkLimits:
        """The thresholds the sink connector's own report checks itself against."""
        return SinkLimits(
            self.max_sink_compact_bytes, self.max_sink_files, self.max_delta_files, self.delta_small_file_bytes
        )


@dataclass(frozen=True)
class FindingsInput:
    """What the checks look at."""

    scan: CheckpointScan
    operators: list[OperatorReport]
    folders: list[FolderCount]
    commits: Mapping[int, CommitEntry]
    metadata_partitions: Mapping[int, int]
    sink: SinkInspection | None
    # What reading every log entry and the newest state files found (None: only the scan's listing is known).
    health: CheckpointHealth | None = None
    state_problems: list[FileProblem] = field(default_factory=list)
    source_problems: list[SourceEntryProblem] = field(default_factory=list)
    conf_partitions: int | None = None  # spark.sql.shuffle.partitions recorded in the offsets: every store's count
    # Operators whose state lives in partition 0 alone, whatever was recorded (formats.keyless_operator).
    single_partition: frozenset[int] = frozenset()
    store_names: Mapping[int, list[str]] = field(default_factory=dict)  # from the operator metadata (Spark 4.0+)

    def restart_point(self) -> RestartPoint:
        """Where a restart starts (from the listing alone when the logs were not read)."""
        if self.health is not None:
            return RestartPoint.of(self.health)
        offsets, commits = self.scan.offset_batches, self.scan.commit_batches
        health = CheckpointHealth(LogHealth(True, offsets), LogHealth(True, commits), True, None)
        return RestartPoint.of(health)


def _batches(batches: list[int]) -> str:
    return f"batch {batches[0]}" if len(batches) == 1 else f"batches {batches[0]}..{batches[-1]}"


def check_batches(scan: CheckpointScan, point: RestartPoint | None = None) -> list[Finding]:
    """NO_COMMITTED_BATCH and UNCOMMITTED_BATCH from the offsets and commits logs (a checkpoint without a commit log,
    written before Spark 2.2, is NO_COMMIT_LOG's case instead)."""
    offsets, commits = scan.offset_batches, scan.commit_batches
    if point is not None:
        if not point.commit_log:
            return []
        offsets = sorted(set(offsets) | ({point.latest_planned} if point.latest_planned is not None else set()))
    if not offsets:
        return []
    latest = offsets[-1]
    if not commits:
        message = (
            f"offsets/ holds {_batches(offsets)} but commits/ is empty: the query planned batch {offsets[0]} "
            "and never finished a batch (the 'stuck at batch 0' case)"
        )
        # A stop during the first batch (a double Ctrl-C, a killed driver) leaves exactly this, and a plain restart
        # re-runs the batch. Deleting the checkpoint is no fix: a file sink that committed the batch would skip it.
        fix = (
            f"restart the query first: Spark re-runs batch {offsets[0]} with the same offsets (a stop during the "
            f"first batch leaves exactly this); if batch {offsets[0]} fails again each time, find why in the driver "
            "log (missing connector jar, schema mismatch, out of memory); if this checkpoint was copied, copy "
            "commits/ too. Keep the checkpoint: on a new one a file sink that committed the batch would skip it"
        )
        return [Finding("NO_COMMITTED_BATCH", Severity.ERROR, message, fix)]
    committed = commits[-1]
    if latest <= committed:
        return []
    gap = latest - committed
    if gap == 1:
        message = f"batch {latest} was planned (offsets/{latest}) but not committed; the last commit is {committed}"
        fix = (
            f"nothing to do if the query stopped mid-batch: Spark re-runs batch {latest} with the same offsets on "
            "restart; if it fails again each time, read the driver log of that batch"
        )
        return [Finding("UNCOMMITTED_BATCH", Severity.WARNING, message, fix)]
    message = (
        f"batches {committed + 1}..{latest} were planned but the last commit is batch {committed}: Spark will "
        f"re-run only batch {latest} and skip the {gap - 1} in between"
    )
    fix = (
        f"restore commits/ for batches {committed + 1}..{latest - 1} from the copy this checkpoint came from, or "
        f"remove offsets/{committed + 2}..{latest} (and their .crc files) so those batches are planned again"
    )
    return [Finding("UNCOMMITTED_BATCH", Severity.ERROR, message, fix)]


def check_files(scan: CheckpointScan, folders: list[FolderCount], thresholds: Thresholds) -> list[Finding]:
    """TOO_MANY_FILES with the count per folder."""
    if scan.files_total <= thresholds.max_files:
        return []
    worst = sorted(folders, key=lambda f: f.files, reverse=True)[:5]
    per_folder = ", ".join(f"{f.folder} {f.files:,}" for f in worst)
    message = f"{scan.files_total:,} files (more than {thresholds.max_files:,}): {per_folder}"
    fix = (
        "fewer files: lower spark.sql.streaming.minBatchesToRetain and spark.sql.shuffle.partitions for new "
        "checkpoints, make sure state maintenance runs (spark.sql.streaming.stateStore.maintenanceInterval), "
        f"or {PRUNE_HINT}"
    )
    return [Finding("TOO_MANY_FILES", Severity.WARNING, message, fix)]


def check_replay(operators: list[OperatorReport], thresholds: Thresholds) -> list[Finding]:
    """LONG_REPLAY_CHAIN per operator: deltas/changelogs a load must replay after its newest snapshot."""
    found = []
    for op in operators:
        if op.max_replay_on_load <= thresholds.max_replay:
            continue
        worst = max(op.stores, key=lambda s: s.replay_on_load)
        since = f"snapshot {worst.newest_snapshot}" if worst.newest_snapshot is not None else "the first version"
        message = (
            f"operator {op.id} ({op.name or 'unnamed'}) replays up to {op.max_replay_on_load} delta/changelog files "
            f"on load (partition {worst.partition}, store {worst.store}, since {since})"
        )
        fix = (
            "snapshots are not being written: keep the query running long enough for maintenance, check "
            "spark.sql.streaming.stateStore.minDeltasForSnapshot (default 10) and maintenanceInterval, and look "
            "for maintenance errors in the executor logs"
        )
        found.append(Finding("LONG_REPLAY_CHAIN", Severity.WARNING, message, fix))
    return found


def check_retention(scan: CheckpointScan, operators: list[OperatorReport], thresholds: Thresholds) -> list[Finding]:
    """RETENTION_TOO_HIGH when logs or state hold far more batches than Spark's default keeps."""
    parts = []
    if len(scan.offset_batches) > thresholds.max_history:
        parts.append(f"offsets/ holds {len(scan.offset_batches):,} batches")
    if len(scan.commit_batches) > thresholds.max_history:
        parts.append(f"commits/ holds {len(scan.commit_batches):,} batches")
    parts += [
        f"state/{op.id} holds {op.versions_held:,} versions"
        for op in operators
        if op.versions_held > thresholds.max_history
    ]
    if not parts:
        return []
    message = "; ".join(parts) + f" (more than {thresholds.max_history})"
    fix = f"set spark.sql.streaming.minBatchesToRetain to the history you need (default 100), then {PRUNE_HINT}"
    return [Finding("RETENTION_TOO_HIGH", Severity.WARNING, message, fix)]


def _orphans(store: StoreScan, op_id: int, last_version: int, commits: Mapping[int, CommitEntry]) -> int:
    count = sum(1 for v in store.versions if v > last_version)
    for version, unique_id, _kind in store.unique_ids:
        commit = commits.get(version - 1)
        if version > last_version or commit is None or op_id not in commit.state_unique_ids:
            continue
        partitions = commit.state_unique_ids[op_id]
        if store.partition < len(partitions) and unique_id not in partitions[store.partition]:
            count += 1
    return count


def check_state(data: FindingsInput) -> list[Finding]:
    """ORPHAN_FILES against the latest commit, and STATE_VERSION_MISSING for the version a restart loads."""
    commits = data.scan.commit_batches
    found = []
    if commits:
        committed = commits[-1]
        needed = committed + 1  # batch b writes state version b + 1
        for op_id, op in sorted(data.scan.operators.items()):
            stores = sorted(op.stores.values(), key=lambda s: (s.partition, s.store))
            orphan_counts = {(s.partition, s.store): _orphans(s, op_id, needed, data.commits) for s in stores}
            orphans = sum(orphan_counts.values())
            if orphans:
                worst = max(orphan_counts, key=lambda key: orphan_counts[key])
                message = (
                    f"state/{op_id} holds {orphans} state file(s) no commit refers to (versions after {needed}, the "
                    f"state of the last committed batch {committed}, or other attempts' unique ids); most in "
                    f"partition {worst[0]}, store {worst[1]}"
                )
                fix = "harmless to a restart (Spark writes those versions again); `checkpoint prune` removes them"
                found.append(Finding("ORPHAN_FILES", Severity.WARNING, message, fix))
    return [*found, *_missing_state(data)[0]]


def _missing_state(data: FindingsInput) -> tuple[list[Finding], bool]:
    point = data.restart_point()
    partitions = {
        op: 1 if op in data.single_partition else data.metadata_partitions.get(op) or data.conf_partitions
        for op in data.scan.operators
    }
    expected = {op: n for op, n in partitions.items() if n}
    return missing_state_findings(data.scan, point.state_version, point.latest_committed, expected, data.store_names)


def check_metadata(health: CheckpointHealth, spark_version: str | None = None) -> list[Finding]:
    """METADATA_MISSING: no `metadata` file while offsets/ or commits/ hold entries. Spark 4.2+ refuses the restart
    (an error where the installed Spark is one of those); earlier lines write a new file with a new query id."""
    if health.metadata_present or not (health.offsets.batches or health.commits.batches):
        return []
    refused = has_defect(Defect.MISSING_METADATA_REFUSED, spark_version)
    version = spark_version or installed_version()
    message = "the `metadata` file (the query id) is missing, while offsets/ and commits/ hold batches"
    impact = (
        f"the query cannot restart on Spark {version}: Spark 4.2+ fails with STREAMING_CHECKPOINT_MISSING_METADATA_FILE"
        if refused
        else f"Spark {version} restarts and writes a new `metadata` with a new query id (listeners and sinks keyed "
        "by the id see a new query); Spark 4.2+ refuses to restart it"
    )
    fix = (
        "restore `metadata` from the copy this checkpoint came from; without one, write a new one as Spark before "
        '4.2 does: a file `metadata` holding {"id":"<a new UUID>"}'
    )
    severity = Severity.ERROR if refused else Severity.WARNING
    return [Finding("METADATA_MISSING", severity, message, fix, "metadata", impact)]


def find_problems(data: FindingsInput, thresholds: Thresholds) -> list[Finding]:
    """Every check, errors first."""
    found = [*check_batches(data.scan, data.restart_point() if data.health is not None else None)]
    if data.health is not None:
        found += check_metadata(data.health)
        whole_folders = _missing_state(data)[1]
        found += damaged_file_findings(data.health, data.scan, data.state_problems, data.source_problems, whole_folders)
        found += gap_findings(data.health)
    found += [
        *check_state(data),
        *check_files(data.scan, data.folders, thresholds),
        *check_replay(data.operators, thresholds),
        *check_retention(data.scan, data.operators, thresholds),
        *(data.sink.findings(thresholds.sink_limits()) if data.sink is not None else []),
    ]
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return sorted(found, key=lambda f: order[f.severity])
