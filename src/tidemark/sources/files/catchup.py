"""Adaptive catch-up of a landing folder: how many backlog files one micro-batch should read (pure arithmetic).

A run that starts behind (after downtime, or the first run over a landing folder) would read its backlog in
steady-state batches of `[source] max_files_per_trigger`, each paying planning, a state commit and a sink commit.
The plan sizes catch-up batches instead: as many bytes as the measured throughput processes in
`[trigger] target_batch_duration`, never more than the memory ceiling the planner's model allows, then balanced
so the backlog splits into equal batches. Spark's `maxFilesPerTrigger` gets the result, and the catch-up query
gets a `maxPartitionBytes` that spreads its read tasks evenly over the slots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from tidemark.compat import StrEnum
from tidemark.config import SourceFormat, TidemarkConfig
from tidemark.sizes import format_size
from tidemark.sources.catchup import Throughput, batches_phrase
from tidemark.storage.uri import parse_location

# Without a measured history: bytes per second one task slot reads, parses and aggregates. Measured
# (benchmarks/throughput.py, JSON events, local[2]) at about 8 MB/s per slot in 1 s batches and 26 MB/s per slot
# in one batch; half the small-batch figure keeps a first guess on the short side.
DEFAULT_BYTES_PER_SECOND_PER_SLOT = 4 * 1024**2
# Spark's defaults for cutting files into read tasks (spark.sql.files.maxPartitionBytes, .openCostInBytes).
SPARK_MAX_PARTITION_BYTES = 128 * 1024**2
SPARK_OPEN_COST_BYTES = 4 * 1024**2
MAX_PARTITION_BYTES_KEY = "spark.sql.files.maxPartitionBytes"
OPEN_COST_KEY = "spark.sql.files.openCostInBytes"
# Above this many paths Spark lists a batch's files with a distributed job (about 0.2 s for 40 local files).
LISTING_THRESHOLD_KEY = "spark.sql.sources.parallelPartitionDiscovery.threshold"
SPARK_LISTING_THRESHOLD = 32
# Settings that decide Spark's split besides tidemark's: with any of them set, tidemark leaves it alone.
_SPLIT_KEYS = (
    MAX_PARTITION_BYTES_KEY,
    OPEN_COST_KEY,
    "spark.sql.files.minPartitionNum",
    "spark.sql.files.maxPartitionNum",
    "spark.sql.leafNodeDefaultParallelism",
    "spark.default.parallelism",
)
# Compression that makes a text file one read task (Hadoop's non-splittable codecs; bzip2 splits).
_WHOLE_FILE_CODECS = (".gz", ".deflate", ".zst", ".zstd", ".lz4", ".snappy", ".br")


class Limit(StrEnum):
    """What decided the size of a catch-up batch."""

    DURATION = "target_batch_duration"
    MEMORY = "memory"
    BACKLOG = "backlog"


def default_throughput(task_slots: int) -> Throughput:
    """The first guess, for a pipeline without history."""
    rate = DEFAULT_BYTES_PER_SECOND_PER_SLOT * max(1, task_slots)
    return Throughput(rate, 0.0, 0, f"default estimate ({task_slots} task slots x 4 MB/s)")


def files_within(sizes: Sequence[int], budget: float) -> int:
    """The most consecutive files (in Spark's order) that stay within budget wherever the batch starts; >= 1."""
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    n = len(sizes)

    def fits(k: int) -> bool:
        return all(prefix[i + k] - prefix[i] <= budget for i in range(n - k + 1))

    low, high = 1, max(1, n)
    while low < high:  # largest k that fits (fits is monotone in k: sizes are non-negative)
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


@dataclass(frozen=True)
class FileSplit:
    """How Spark cuts a batch's files into read tasks: splits of at most max_partition_bytes, each file
    counted at its size plus open_cost_bytes; files cut into pieces only when splittable."""

    max_partition_bytes: int = SPARK_MAX_PARTITION_BYTES
    open_cost_bytes: int = SPARK_OPEN_COST_BYTES
    splittable: bool = True


def read_tasks(sizes: Sequence[int], task_slots: int, split: FileSplit) -> list[int]:
    """What each read task Spark makes of these files costs (bytes plus open costs), in task order.

    Spark 4.1's FilePartition: maxSplitBytes = min(maxPartitionBytes, max(openCost, total cost / slots));
    files are cut into pieces of at most that, sorted by size (largest first) and packed in order, a task
    closing when the next piece would take it over maxSplitBytes. A file that is not splittable (JSON with
    multiLine, a whole-file codec such as gzip) is one piece.
    """
    open_cost = split.open_cost_bytes
    total = sum(size + open_cost for size in sizes)
    max_split = min(split.max_partition_bytes, max(open_cost, total // max(1, task_slots)))
    if split.splittable:
        cut = [min(max_split, size - offset) for size in sizes for offset in range(0, size, max_split)]
    else:
        cut = list(sizes)
    pieces = sorted(cut, reverse=True)
    tasks: list[int] = []
    cost = 0
    for piece in pieces:
        if cost and cost + piece > max_split:
            tasks.append(cost)
            cost = 0
        cost += piece + open_cost
    return [*tasks, cost] if cost else tasks


def busiest_slot(tasks: Sequence[int], task_slots: int) -> int:
    """The cost the busiest slot gets when each task in order goes to the slot that frees up first."""
    loads = [0] * max(1, task_slots)
    for task in tasks:
        loads[loads.index(min(loads))] += task
    return max(loads)


# Candidate wave counts from the fewest on, and the gain a split must bring over Spark's (or fewer waves).
_EXTRA_WAVES = 4
_MIN_GAIN = 0.05


def balanced_split_bytes(sizes: Sequence[int], task_slots: int, split: FileSplit) -> int | None:
    """A `maxPartitionBytes` that spreads a batch's read tasks evenly over the slots; None to keep Spark's.

    Spark packs tasks of up to maxPartitionBytes (or total / slots when smaller), rarely a multiple of the
    slots, and the last wave runs part-empty: 40 files of 4.35 MiB on 2 slots made 3 tasks of 15, 15 and 10
    files, so one core read 25 files while the other read 15. This tries splits that make the fewest possible
    waves of equal tasks and up to 3 more, simulates how Spark packs each (read_tasks) and keeps the one whose
    busiest slot has least to read (a split with more waves must beat the best so far by 5 %), if it beats
    Spark's own split by 5 %. Never larger than Spark's split: no task reads more than it would.
    """
    cost = sum(size + split.open_cost_bytes for size in sizes)
    if task_slots <= 1 or not sizes:
        return None
    spark_own = busiest_slot(read_tasks(sizes, task_slots, split), task_slots)
    fewest = math.ceil(cost / (task_slots * split.max_partition_bytes))
    best: tuple[int, int] | None = None  # (busiest slot, split)
    for waves in range(fewest, fewest + _EXTRA_WAVES):
        candidate = math.ceil(cost / (waves * task_slots))
        tried = FileSplit(candidate, split.open_cost_bytes, split.splittable)
        busiest = busiest_slot(read_tasks(sizes, task_slots, tried), task_slots)
        # More, smaller tasks cost more per task than the model counts: they must earn their place.
        if best is None or busiest < (1 - _MIN_GAIN) * best[0]:
            best = (busiest, candidate)
    assert best is not None  # the loop tries at least one split
    if best[0] > (1 - _MIN_GAIN) * spark_own:
        return None
    return best[1]


@dataclass(frozen=True)
class FileCatchUpPlan:
    """How one phase of a run reads the landing folder's backlog: catch-up batches, or the steady-state size."""

    active: bool
    reason: str
    backlog_files: int
    backlog_bytes: int
    steady_files_per_trigger: int | None  # [source] max_files_per_trigger (None: no limit)
    files_per_trigger: int | None  # what this phase gives Spark's maxFilesPerTrigger
    bytes_per_trigger: int  # the byte budget of one catch-up batch
    expected_batches: int
    expected_batch_ms: float
    limited_by: Limit
    target_batch_ms: float
    throughput_bytes_per_second: float
    fixed_batch_ms: float
    throughput_origin: str
    memory_ceiling_bytes: int
    # spark.sql.files.maxPartitionBytes for the catch-up query (balanced_split_bytes); None: Spark's own.
    split_bytes: int | None = None

    def describe(self) -> str:
        """One line for the run's log."""
        rate = f"{format_size(self.throughput_bytes_per_second)}/s from {self.throughput_origin}"
        split = f"; read tasks of {format_size(self.split_bytes)}" if self.split_bytes else ""
        if not self.active:
            waiting = f"{self.backlog_files} files, {format_size(self.backlog_bytes)} waiting"
            return f"catch-up: off ({self.reason}); {waiting}"
        return (
            f"catch-up: {self.reason} ({format_size(self.backlog_bytes)}; limited by {self.limited_by.value}, "
            f"about {self.expected_batch_ms / 1000:.0f} s per batch at {rate}; memory ceiling "
            f"{format_size(self.memory_ceiling_bytes)} per batch{split})"
        )

    def phase_config(self, config: TidemarkConfig) -> TidemarkConfig:
        """The config with the plan's files per trigger as `[source] max_files_per_trigger`."""
        return with_files_per_trigger(config, self.files_per_trigger)

    def spark_conf(self, config: TidemarkConfig) -> dict[str, str]:
        """Settings for the catch-up query only: the balanced file split, and its file listing.

        A catch-up batch hands Spark more files than the steady one; past 32, Spark stats them with a
        distributed job of one task per file. On a local disk the driver does that faster itself; on object
        stores, where each stat is a request, the parallel job stays.
        """
        if not self.active:
            return {}
        conf: dict[str, str] = {}
        if self.split_bytes is not None:
            conf[MAX_PARTITION_BYTES_KEY] = str(self.split_bytes)
        files = self.files_per_trigger or 0
        local = config.source.path is not None and parse_location(config.source.path).is_local
        if local and files > SPARK_LISTING_THRESHOLD and LISTING_THRESHOLD_KEY not in config.spark.conf:
            conf[LISTING_THRESHOLD_KEY] = str(files)
        return conf


def with_files_per_trigger(config: TidemarkConfig, files: int | None) -> TidemarkConfig:
    """The config with another `[source] max_files_per_trigger`."""
    source = config.source.model_copy(update={"max_files_per_trigger": files})
    return config.model_copy(update={"source": source})


def file_split(config: TidemarkConfig, files: Sequence[str] = ()) -> FileSplit | None:
    """How Spark will cut these files into tasks; None when tidemark should not choose the split.

    Not chosen: when [spark.conf] sets the split or what Spark divides it by, and for Parquet, whose work
    follows row groups rather than byte ranges.
    """
    if any(key in config.spark.conf for key in _SPLIT_KEYS) or config.source.format is SourceFormat.PARQUET:
        return None
    multi_line = str(config.source.options.get("multiLine", "false")).lower() == "true"
    whole_file_codec = any(name.lower().endswith(_WHOLE_FILE_CODECS) for name in files)
    return FileSplit(splittable=not (multi_line or whole_file_codec))


def plan_catch_up(
    sizes: Sequence[int],
    steady: int | None,
    target: timedelta,
    throughput: Throughput,
    ceiling_bytes: int,
    task_slots: int = 1,
    split: FileSplit | None = FileSplit(),
) -> FileCatchUpPlan:
    """Size catch-up batches for the backlog `sizes` (file sizes in Spark's reading order).

    split: how Spark cuts files into tasks; None when the user set it and tidemark must not change it.
    """
    target_ms = target.total_seconds() * 1000
    by_time = max(0.0, throughput.bytes_per_second * (target_ms - throughput.fixed_ms) / 1000)
    budget = min(by_time, float(ceiling_bytes))
    n, total = len(sizes), sum(sizes)
    fitting = files_within(sizes, budget) if n else 0
    if n and fitting >= n:
        limit = Limit.BACKLOG
    else:
        limit = Limit.MEMORY if ceiling_bytes < by_time else Limit.DURATION

    def plan(active: bool, reason: str, files: int | None) -> FileCatchUpPlan:
        per_batch = files if files is not None else (steady or n or 1)
        batches = math.ceil(n / per_batch) if n else 0
        slices = [sizes[i : i + per_batch] for i in range(0, n, per_batch)]
        heaviest = max(slices, key=sum, default=[])
        biggest = sum(heaviest)
        return FileCatchUpPlan(
            active=active,
            reason=reason,
            backlog_files=n,
            backlog_bytes=total,
            steady_files_per_trigger=steady,
            files_per_trigger=files,
            bytes_per_trigger=int(budget),
            expected_batches=batches,
            expected_batch_ms=throughput.batch_ms(biggest) if n else 0.0,
            limited_by=limit,
            target_batch_ms=target_ms,
            throughput_bytes_per_second=throughput.bytes_per_second,
            fixed_batch_ms=throughput.fixed_ms,
            throughput_origin=throughput.origin,
            memory_ceiling_bytes=ceiling_bytes,
            split_bytes=balanced_split_bytes(heaviest, task_slots, split) if active and split else None,
        )

    if n == 0:
        return plan(False, "no backlog", steady)
    if steady is not None and n <= steady:
        return plan(False, f"the backlog of {n} files fits one steady-state batch", steady)
    if steady is None and fitting >= n:
        return plan(False, f"without max_files_per_trigger Spark reads the {n} backlog files in one batch", steady)
    if steady is not None and fitting <= steady:
        why = "the memory ceiling" if limit is Limit.MEMORY else "the target batch duration"
        return plan(False, f"{why} allows no more than the steady-state {steady} files per batch", steady)
    batches = math.ceil(n / fitting)
    balanced = math.ceil(n / batches)  # every window of `balanced` files lies inside one of `fitting` files
    return plan(True, f"catching up {n} files in {batches_phrase(batches)} of up to {balanced}", balanced)
