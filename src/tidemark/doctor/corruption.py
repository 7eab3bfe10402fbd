"""Findings about damaged, missing and misplaced files: what each breaks on restart, and how to get going again.

What Spark reads when a query restarts (MicroBatchExecution.populateStartOffsets, Spark 2.2 to 4.3): `metadata`;
the newest offsets entry L and the one before it (where batch L starts); the newest commit C; each file source's
log from its newest compact entry on; then the first batch loads state version C + 1 of every store (the newest
snapshot at or below it and every delta or changelog after it). Damage there stops the restart: an error. Damage
anywhere else does not, but costs history (a rollback to an earlier batch, `state diff`): a warning.

The way out of damaged newest files is a rollback to the newest committed batch N that a restart can read
completely (its offsets and commit, offsets N-1, every store's state version N+1): `tidemark recover CONFIG
--to-batch N`, or the same moves by hand for a checkpoint tidemark did not write.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from tidemark.findings import Finding, Severity
from tidemark.formats import CheckpointHealth, CheckpointScan, Damage, FileProblem, SourceEntryProblem


@dataclass(frozen=True)
class RestartPoint:
    """Where a restart starts as the logs stand: the newest planned batch, the newest commit, the state it loads."""

    latest_planned: int | None  # L: offsets/ (files or not)
    latest_committed: int | None  # C: commits/
    commit_log: bool  # the writer kept a commit log (Spark 2.2+)
    state_version: int | None  # the version the first batch after a restart loads

    @classmethod
    def of(cls, health: CheckpointHealth) -> RestartPoint:
        """From the logs' listings (damaged entries count: Spark lists them too)."""
        planned = health.offsets.batches[-1] if health.offsets.batches else None
        committed = health.commits.batches[-1] if health.commits.batches else None
        commit_log = not written_before_spark_22(health)
        if committed is not None:
            version: int | None = committed + 1
        elif not commit_log and planned is not None:
            version = planned  # before Spark 2.2: the newest planned batch is run again, loading version L
        else:
            version = None
        return cls(planned, committed, commit_log, version)


def written_before_spark_22(health: CheckpointHealth) -> bool:
    """No commits/ and offsets without the recorded SQL conf: Spark 2.0/2.1, which kept no commit log.

    The folder alone does not tell: on an object store an empty commits/ (a query stuck at batch 0) does not
    exist either. Spark 2.2 began both the commit log and the conf in each offsets entry.
    """
    if health.commits.present or not health.offsets.offsets:
        return False
    return all(not entry.conf for entry in health.offsets.offsets.values())


def _read_on_restart(problem: FileProblem, point: RestartPoint) -> bool:
    if problem.part == "metadata":
        return True
    if problem.part == "offsets" and point.latest_planned is not None and problem.batch is not None:
        return problem.batch >= point.latest_planned - 1
    if problem.part == "commits" and point.latest_committed is not None:
        return problem.batch == point.latest_committed
    return problem.part == "state"


def rollback_target(
    health: CheckpointHealth,
    scan: CheckpointScan,
    damaged: list[FileProblem],
    unreadable_sources: list[SourceEntryProblem],
    missing_stores: bool,
) -> int | None:
    """The newest committed batch a rollback can restart from: every file that restart reads is readable."""
    if missing_stores:
        return None
    bad_versions: dict[tuple[int, int, str], set[int]] = {}
    for p in damaged:
        if p.part == "state" and p.operator is not None and p.partition is not None and p.store and p.batch:
            bad_versions.setdefault((p.operator, p.partition, p.store), set()).add(p.batch)
    source_ids = [s.problem.batch for s in unreadable_sources if s.read_on_restart and s.problem.batch is not None]
    for batch in sorted(health.commits.commits, reverse=True):
        if batch not in health.offsets.offsets or (batch > 0 and batch - 1 not in health.offsets.offsets):
            continue
        if any(s <= batch for s in source_ids):
            continue
        version = batch + 1
        if all(
            store.can_load(version) and not any(v <= version for v in bad_versions.get((op_id, part, name), ()))
            for op_id, op in scan.operators.items()
            for (part, name), store in op.stores.items()
        ):
            return batch
    return None


def rollback_fix(target: int | None, point: RestartPoint, also: tuple[str, ...] = ()) -> str:
    """How to restart: the rollback to `target` (by hand also moving the damaged files `also`), or what is left
    when there is none."""
    if target is None:
        return (
            "no committed batch can be restarted from with these files: restore them from a backup or the copy this "
            "checkpoint came from; otherwise start a new checkpoint (`tidemark recover CONFIG` replays the input "
            "from what the sink holds, nothing lost or duplicated)"
        )
    after = target + 1
    if target == point.latest_committed and point.latest_planned == target + 1:
        hand = f"move offsets/{point.latest_planned} (and its .crc files) aside"
    else:
        hand = (
            f"move aside offsets/ and commits/ entries after {target} and the state files of versions after {after}"
            f" (with their .crc files)"
        )
    if also:
        hand += f", {', '.join(also)}"
    return (
        f"roll back to batch {target}: `tidemark recover CONFIG --to-batch {target} --apply` for a tidemark pipeline "
        f"(it also rolls the sink back); by hand, {hand}, and a file sink's log entries after {target}. "
        f"Spark then restarts at batch {after}"
    )


def describe(problem: FileProblem) -> str:
    """One sentence naming the file and what is wrong with it."""
    detail = problem.detail
    if detail.startswith(problem.rel):
        return detail
    if detail.startswith("it "):
        return f"{problem.rel} {detail[3:]}"
    return f"{problem.rel}: {detail}"


def _impact(problem: FileProblem, point: RestartPoint) -> str:
    part, batch = problem.part, problem.batch
    if part == "metadata":
        return "the query cannot start: Spark reads the query id from metadata first and fails on it"
    if part == "offsets" and batch == point.latest_planned:
        return (
            f"the query cannot restart: Spark resumes from offsets/{batch}, the newest planned batch, and fails on it"
        )
    if part == "offsets" and point.latest_planned is not None and batch == point.latest_planned - 1:
        return (
            f"the query cannot restart: Spark reads offsets/{batch} for where batch {point.latest_planned} starts, "
            "and fails on it"
        )
    if part == "commits" and batch == point.latest_committed:
        return f"the query cannot restart: Spark reads commits/{batch}, the newest commit, and fails on it"
    if part == "state":
        return (
            f"the query cannot restart: its first batch loads state version {batch} of operator {problem.operator} "
            f"(partition {problem.partition}, store {problem.store}) and fails on this file"
        )
    return (
        f"a restart does not read it and works; but batch {batch}'s history is lost to rollbacks and to "
        "`tidemark state diff`"
    )


_CODES = {
    "offsets": "CORRUPT_OFFSETS",
    "commits": "CORRUPT_COMMIT",
    "metadata": "CORRUPT_METADATA",
    "state": "CORRUPT_STATE_FILE",
}


def _code(problem: FileProblem) -> str:
    if problem.damage is Damage.UNKNOWN_VERSION:
        return "UNKNOWN_LOG_VERSION"
    if problem.damage is Damage.JAVA_SERIALIZED:
        return "SPARK_20_LOG"
    if problem.part.startswith("sources"):
        return "CORRUPT_SOURCE_LOG"
    return _CODES.get(problem.part, "CORRUPT_FILE")


def damaged_file_findings(
    health: CheckpointHealth,
    scan: CheckpointScan,
    state_problems: list[FileProblem],
    sources: list[SourceEntryProblem],
    missing_stores: bool,
) -> list[Finding]:
    """One finding per damaged file (state files grouped per operator when many), errors where a restart reads it."""
    point = RestartPoint.of(health)
    logs = [p for p in health.problems if p.part != "metadata"]
    blocking = [p for p in [*logs, *state_problems] if _read_on_restart(p, point)]
    blocking_sources = [s for s in sources if s.read_on_restart]
    target = None
    if blocking or blocking_sources:
        target = rollback_target(health, scan, blocking, blocking_sources, missing_stores)
    fix = rollback_fix(target, point, tuple(s.problem.rel for s in blocking_sources))
    found = [*_metadata_findings(health), *_log_findings(logs, point, fix)]
    found += _state_findings(state_problems, point, fix)
    found += _source_findings(sources, point, target, fix)
    return found


def _metadata_findings(health: CheckpointHealth) -> list[Finding]:
    point = RestartPoint.of(health)
    found = []
    for problem in health.problems:
        if problem.part != "metadata":
            continue
        message = describe(problem)
        fix = (
            f'write {{"id":"{uuid.uuid4()}"}} into metadata (a new query id: it only names the query in progress '
            "events and listeners; offsets, commits and state do not depend on it), or the old id if a progress log "
            "or your monitoring recorded it"
        )
        found.append(Finding("CORRUPT_METADATA", Severity.ERROR, message, fix, problem.rel, _impact(problem, point)))
    return found


def _log_findings(problems: list[FileProblem], point: RestartPoint, fix: str) -> list[Finding]:
    found = []
    for problem in problems:
        blocks = _read_on_restart(problem, point)
        message = describe(problem)
        this_fix = fix if blocks else f"nothing needed to restart; to keep the history whole, restore {problem.rel}"
        if problem.damage is Damage.JAVA_SERIALIZED:
            this_fix = (
                "no Spark since 2.1 continues a Spark 2.0 checkpoint: start a new checkpoint (`tidemark recover "
                "CONFIG` replays the input from what the sink holds)"
            )
        if problem.damage is Damage.UNKNOWN_VERSION:
            message += " (written by a newer Spark, or damaged)"
        severity = Severity.ERROR if blocks else Severity.WARNING
        found.append(Finding(_code(problem), severity, message, this_fix, problem.rel, _impact(problem, point)))
    return found


def _state_findings(problems: list[FileProblem], point: RestartPoint, fix: str) -> list[Finding]:
    by_operator: dict[int | None, list[FileProblem]] = {}
    for problem in problems:
        by_operator.setdefault(problem.operator, []).append(problem)
    found = []
    for operator, group in sorted(by_operator.items(), key=lambda item: item[0] or 0):
        first = group[0]
        details = "; ".join(describe(p) for p in group[:3])
        more = f" and {len(group) - 3} more file(s)" if len(group) > 3 else ""
        message = f"state of operator {operator}, version {first.batch}: {details}{more}"
        files = ", ".join(p.rel for p in group[:5]) + (" ..." if len(group) > 5 else "")
        found.append(Finding("CORRUPT_STATE_FILE", Severity.ERROR, message, fix, files, _impact(first, point)))
    return found


def _source_findings(
    sources: list[SourceEntryProblem], point: RestartPoint, target: int | None, fix: str
) -> list[Finding]:
    found = []
    for entry in sources:
        problem = entry.problem
        message = describe(problem)
        if not entry.read_on_restart:
            impact = (
                "a restart does not read it (a newer compact entry covers it, or the source read its start "
                "offsets from it only when the query first started) and works"
            )
            this_fix = f"nothing needed to restart; restore {problem.rel} to keep the source's history whole"
            found.append(Finding("CORRUPT_SOURCE_LOG", Severity.WARNING, message, this_fix, problem.rel, impact))
            continue
        impact = (
            f"the query cannot restart: the file source re-reads its log (the files it has seen) from its newest "
            f"compact entry on, and fails on {problem.rel}"
        )
        found.append(Finding("CORRUPT_SOURCE_LOG", Severity.ERROR, message, fix, problem.rel, impact))
    return found


def gap_findings(health: CheckpointHealth) -> list[Finding]:
    """LOG_GAP (entries missing between the oldest and the newest), COMMIT_AHEAD and NO_COMMIT_LOG."""
    offsets, commits = health.offsets.batches, health.commits.batches
    found: list[Finding] = []
    if offsets and written_before_spark_22(health):
        latest = offsets[-1]
        message = (
            f"no commits/ folder: the checkpoint was written by Spark before 2.2, which kept no commit log "
            f"(offsets/ holds {_span(offsets)})"
        )
        impact = (
            f"Spark 2.2 and later restart it: they run batch {latest} (the newest planned) again, not knowing whether "
            "it finished; a file sink skips a batch its log already holds, other sinks may see it twice"
        )
        fix = "nothing needed; the restart writes commits/ from then on"
        found.append(Finding("NO_COMMIT_LOG", Severity.INFO, message, fix, "commits", impact))
    if not offsets:
        return found
    low, high = offsets[0], offsets[-1]
    missing_offsets = sorted(set(range(low, high + 1)) - set(offsets))
    span_commits = [b for b in commits if low <= b <= high]
    missing_commits = sorted(set(range(low, (span_commits[-1] if span_commits else low - 1) + 1)) - set(commits))
    missing_commits = [b for b in missing_commits if b >= (commits[0] if commits else high + 1)]
    if missing_offsets or missing_commits:
        parts = []
        if missing_offsets:
            parts.append(f"offsets/ has no entry for {_ids(missing_offsets)}")
        if missing_commits:
            parts.append(f"commits/ has no entry for {_ids(missing_commits)}")
        message = "; ".join(parts) + f" (offsets/ holds {_span(offsets)}, commits/ {_span(commits)})"
        previous = high - 1
        if high > 0 and previous in missing_offsets:
            impact = (
                f"the query cannot restart: Spark reads offsets/{previous} for where batch {high} starts, and it is "
                "gone"
            )
            fix = (
                f"restore offsets/{previous} from the copy this checkpoint came from; otherwise roll back to a batch "
                f"whose offsets and the ones before it exist (`tidemark recover CONFIG --to-batch N`)"
            )
            severity = Severity.ERROR
        else:
            impact = (
                "a restart works (Spark reads only the newest entries), but the batches in the gap are lost to "
                "rollbacks, `tidemark audit` and `tidemark state diff`; a gap is a sign of a partial copy or of "
                "files deleted by hand"
            )
            fix = "restore the missing entries from the copy this checkpoint came from, if there is one"
            severity = Severity.WARNING
        found.append(Finding("LOG_GAP", severity, message, fix, "offsets" if missing_offsets else "commits", impact))
    if commits and commits[-1] > high:
        ahead = [b for b in commits if b > high]
        message = f"commits/ holds {_ids(ahead)}, after the newest planned batch {high} (offsets/{high})"
        impact = (
            f"the query cannot restart cleanly: Spark re-runs batch {high + 1 if high in commits else high} and then "
            "fails writing a commit that already exists"
        )
        fix = f"move commits/ entries after {high} (and their .crc files) aside"
        found.append(Finding("COMMIT_AHEAD_OF_OFFSETS", Severity.ERROR, message, fix, "commits", impact))
    return found


def missing_state_findings(
    scan: CheckpointScan,
    version: int | None,
    committed: int | None,
    partitions: Mapping[int, int],
    store_names: Mapping[int, list[str]],
) -> tuple[list[Finding], bool]:
    """STATE_VERSION_MISSING: a store of some partition cannot rebuild the version a restart loads (a partition
    or store folder gone, or files missing). Also says whether whole folders are gone (no rollback helps)."""
    if version is None:
        return [], False
    found = []
    whole_folders = False
    for op_id, op in sorted(scan.operators.items()):
        stores = sorted(op.stores.values(), key=lambda s: (s.partition, s.store))
        if not stores:
            continue
        names = list(dict.fromkeys([*store_names.get(op_id, []), *sorted({s.store for s in stores})]))
        present = {(s.partition, s.store) for s in stores}
        partition_ids = {s.partition for s in stores}
        expected = partitions.get(op_id, max(partition_ids) + 1)
        missing = [f"partition {s.partition} store {s.store}" for s in stores if not s.can_load(version)]
        gone = [p for p in range(expected) if p not in partition_ids]
        gone_stores = [(p, n) for p in sorted(partition_ids) for n in names if (p, n) not in present]
        if gone or gone_stores:
            whole_folders = True
        missing += [f"partition {p} (state/{op_id}/{p} is gone)" for p in gone]
        missing += [f"partition {p} store {n} (its folder is gone)" for p, n in gone_stores]
        if not missing:
            continue
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        after = f" (after committed batch {committed})" if committed is not None else ""
        message = f"state/{op_id} cannot rebuild version {version}{after}: files are missing for {shown}"
        impact = (
            f"the query cannot restart: its first batch loads state version {version} of every partition and store, "
            "and fails on the missing ones"
        )
        fix = (
            "restore the missing state files from a backup or the copy this checkpoint came from; without them only "
            "a new checkpoint recovers (`tidemark recover CONFIG` replays the input from what the sink holds)"
        )
        found.append(Finding("STATE_VERSION_MISSING", Severity.ERROR, message, fix, f"state/{op_id}", impact))
    return found, whole_folders


def _ids(batches: list[int]) -> str:
    if len(batches) == 1:
        return f"batch {batches[0]}"
    runs: list[str] = []
    start = prev = batches[0]
    for b in [*batches[1:], None]:
        if b is not None and b == prev + 1:
            prev = b
            continue
        runs.append(str(start) if start == prev else f"{start}..{prev}")
        if b is not None:
            start = prev = b
    return "batches " + ", ".join(runs)


def _span(batches: list[int]) -> str:
    return f"{batches[0]}..{batches[-1]}" if batches else "nothing"
