"""The executor memory model of Spark's unified memory manager, and the plan it yields for a measured load."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tidemark.compat import StrEnum
from tidemark.config.model import StateStoreKind
from tidemark.errors import UsageError
from tidemark.sizes import format_size

if TYPE_CHECKING:
    from tidemark.sizing.forecast import Forecast

MIB = 1024**2
RESERVED_BYTES = 300 * MIB
# Spark refuses heaps below 1.5 x the reserved memory ("System memory ... must be at least 471859200").
MIN_HEAP_BYTES = 450 * MIB
MIN_OVERHEAD_BYTES = 384 * MIB
DEFAULT_OVERHEAD_FACTOR = 0.10
DEFAULT_MEMORY_FRACTION = 0.6
DEFAULT_STORAGE_FRACTION = 0.5
TIGHT_UTILIZATION = 0.8
DEFAULT_TARGET_UTILIZATION = 0.8


class Verdict(StrEnum):
    """How the required execution memory compares with what the executor offers."""

    OK = "ok"
    TIGHT = "tight"
    OVER = "over"


def verdict_for(utilization: float) -> Verdict:
    """ok up to 80 %, tight above 80 % and up to 100 %, over above 100 %."""
    if utilization > 1.0:
        return Verdict.OVER
    if utilization > TIGHT_UTILIZATION:
        return Verdict.TIGHT
    return Verdict.OK


@dataclass(frozen=True)
class MemoryConf:
    """The Spark settings that decide an executor's memory, already parsed into bytes."""

    executor_memory_bytes: int
    executors: int = 1
    cores: int = 1
    memory_fraction: float = DEFAULT_MEMORY_FRACTION
    storage_fraction: float = DEFAULT_STORAGE_FRACTION
    overhead_bytes: int | None = None
    overhead_factor: float = DEFAULT_OVERHEAD_FACTOR
    off_heap_bytes: int = 0
    pyspark_memory_bytes: int = 0
    state_store: StateStoreKind = StateStoreKind.HDFS
    rocksdb_bounded_bytes: int | None = None
    local: bool = False  # a local master: the driver's JVM is the one executor, on this machine

    def __post_init__(self) -> None:
        if self.executor_memory_bytes < MIN_HEAP_BYTES:
            msg = (
                f"executor memory {format_size(self.executor_memory_bytes)} is below Spark's minimum of 450 MiB "
                "(1.5 x the 300 MiB reserved memory): give at least --executor-memory 450m"
            )
            raise UsageError(msg)
        if self.executors < 1 or self.cores < 1:
            msg = "--executors and --cores must be at least 1"
            raise UsageError(msg)
        if not 0 < self.memory_fraction <= 1:
            msg = f"spark.memory.fraction must be in (0, 1], not {self.memory_fraction}"
            raise UsageError(msg)
        if not 0 <= self.storage_fraction < 1:
            msg = f"spark.memory.storageFraction must be in [0, 1), not {self.storage_fraction}"
            raise UsageError(msg)


@dataclass(frozen=True)
class MemoryLoad:
    """What the job puts in memory, summed over the whole cluster, with where each figure came from."""

    state_bytes: int = 0
    shuffle_bytes: int = 0
    sort_bytes: int = 0
    cached_bytes: int = 0
    origin: dict[str, str] = field(default_factory=dict)

    def scaled(self, factor: float) -> MemoryLoad:
        """The load at factor x the event rate: state (live keys), shuffle and sort grow with it, the cache does not."""
        return replace(
            self,
            state_bytes=math.ceil(self.state_bytes * factor),
            shuffle_bytes=math.ceil(self.shuffle_bytes * factor),
            sort_bytes=math.ceil(self.sort_bytes * factor),
        )


@dataclass(frozen=True)
class ExecutorLayout:
    """How one executor's memory splits into Spark's regions (bytes)."""

    heap_bytes: int
    reserved_bytes: int
    usable_bytes: int
    unified_bytes: float
    storage_region_bytes: float
    execution_region_bytes: float
    user_bytes: float
    overhead_bytes: int
    off_heap_bytes: int
    pyspark_memory_bytes: int
    rocksdb_native_bytes: float
    container_bytes: int


@dataclass(frozen=True)
class Usage:
    """Available and required execution memory, for one executor or the whole cluster."""

    execution_available_bytes: float
    execution_without_borrowing_bytes: float
    required_bytes: float
    state_on_heap_bytes: float
    shuffle_bytes: float
    sort_bytes: float
    cached_bytes: float
    utilization: float
    verdict: Verdict


@dataclass(frozen=True)
class Recommendation:
    """The smallest executor heap that keeps utilization at or under the target."""

    executor_memory_bytes: int
    executor_memory: str
    target_utilization: float
    utilization_at_recommended: float
    memory_overhead_bytes: int
    container_bytes: int
    change: str


@dataclass(frozen=True)
class Projection:
    """The plan at scale x the event rate."""

    scale: float
    load: MemoryLoad
    per_executor: Usage
    cluster: Usage
    verdict: Verdict
    recommendation: Recommendation


@dataclass(frozen=True)
class MemoryPlan:
    """The whole answer of `tidemark plan memory`."""

    conf: MemoryConf
    load: MemoryLoad
    layout: ExecutorLayout
    per_executor: Usage
    cluster: Usage
    verdict: Verdict
    recommendation: Recommendation
    projection: Projection | None
    notes: tuple[str, ...]
    # Where the executor runs out of memory as the measured state grows (given --from-log/--from-checkpoint).
    forecast: Forecast | None = None


def overhead_for(conf: MemoryConf, heap_bytes: int | None = None) -> int:
    """spark.executor.memoryOverhead when set, else max(384 MiB, factor x heap)."""
    if conf.overhead_bytes is not None:
        return conf.overhead_bytes
    heap = conf.executor_memory_bytes if heap_bytes is None else heap_bytes
    return max(MIN_OVERHEAD_BYTES, int(conf.overhead_factor * heap))


def rocksdb_native_per_executor(conf: MemoryConf, load: MemoryLoad) -> float:
    """RocksDB's native memory on one executor: its bounded cap when set, else the state it reports."""
    if conf.state_store is not StateStoreKind.ROCKSDB:
        return 0.0
    if conf.rocksdb_bounded_bytes is not None:
        return float(conf.rocksdb_bounded_bytes)
    return load.state_bytes / conf.executors


def layout_for(conf: MemoryConf, load: MemoryLoad | None = None) -> ExecutorLayout:
    """Split one executor's heap the way the unified memory manager does."""
    heap = conf.executor_memory_bytes
    usable = heap - RESERVED_BYTES
    unified = usable * conf.memory_fraction
    storage = unified * conf.storage_fraction
    overhead = overhead_for(conf)
    return ExecutorLayout(
        heap_bytes=heap,
        reserved_bytes=RESERVED_BYTES,
        usable_bytes=usable,
        unified_bytes=unified,
        storage_region_bytes=storage,
        execution_region_bytes=unified - storage,
        user_bytes=usable - unified,
        overhead_bytes=overhead,
        off_heap_bytes=conf.off_heap_bytes,
        pyspark_memory_bytes=conf.pyspark_memory_bytes,
        rocksdb_native_bytes=rocksdb_native_per_executor(conf, load or MemoryLoad()),
        container_bytes=heap + overhead + conf.off_heap_bytes + conf.pyspark_memory_bytes,
    )


def _available(layout: ExecutorLayout, cached: float) -> float:
    # Execution borrows whatever storage no cache holds, and can evict cached blocks down to the storage region.
    return max(layout.unified_bytes - cached, layout.execution_region_bytes)


def per_executor_usage(conf: MemoryConf, load: MemoryLoad, layout: ExecutorLayout) -> Usage:
    """One executor's share of the load (spread evenly) against its execution memory."""
    n = conf.executors
    # HDFS-backed state lives on the heap in maps the memory manager does not track, so it eats execution memory.
    state = load.state_bytes / n if conf.state_store is StateStoreKind.HDFS else 0.0
    shuffle, sort, cached = load.shuffle_bytes / n, load.sort_bytes / n, load.cached_bytes / n
    required = state + shuffle + sort
    available = _available(layout, cached)
    utilization = required / available
    return Usage(
        execution_available_bytes=available,
        execution_without_borrowing_bytes=layout.execution_region_bytes,
        required_bytes=required,
        state_on_heap_bytes=state,
        shuffle_bytes=shuffle,
        sort_bytes=sort,
        cached_bytes=cached,
        utilization=utilization,
        verdict=verdict_for(utilization),
    )


def cluster_usage(per_executor: Usage, executors: int) -> Usage:
    """The per-executor figures times the number of executors (same utilization)."""
    n = executors
    return replace(
        per_executor,
        execution_available_bytes=per_executor.execution_available_bytes * n,
        execution_without_borrowing_bytes=per_executor.execution_without_borrowing_bytes * n,
        required_bytes=per_executor.required_bytes * n,
        state_on_heap_bytes=per_executor.state_on_heap_bytes * n,
        shuffle_bytes=per_executor.shuffle_bytes * n,
        sort_bytes=per_executor.sort_bytes * n,
        cached_bytes=per_executor.cached_bytes * n,
    )


def smallest_heap(conf: MemoryConf, required: float, cached: float, target: float) -> int:
    """The smallest heap (whole MiB, at least 450 MiB) whose utilization stays at or under target."""
    needed = required / target
    fraction, storage = conf.memory_fraction, conf.storage_fraction
    # available = max(unified - cached, unified x (1 - storageFraction)) >= needed, solved for unified.
    unified = min(needed + cached, needed / (1 - storage))
    heap = RESERVED_BYTES + unified / fraction
    return max(MIN_HEAP_BYTES, math.ceil(heap / MIB) * MIB)


def recommend(conf: MemoryConf, load: MemoryLoad, target: float) -> Recommendation:
    """Size the executor heap (and the overhead, for RocksDB) for a load."""
    layout = layout_for(conf, load)
    usage = per_executor_usage(conf, load, layout)
    heap = smallest_heap(conf, usage.required_bytes, usage.cached_bytes, target)
    sized = replace(conf, executor_memory_bytes=heap)
    overhead = overhead_for(sized)
    native = rocksdb_native_per_executor(conf, load)
    if native > 0 and conf.overhead_bytes is None:
        # RocksDB memory is native: it has to fit in the container next to the JVM's own off-heap needs.
        overhead = math.ceil((native + overhead) / MIB) * MIB
    elif native > overhead:
        overhead = math.ceil((native + MIN_OVERHEAD_BYTES) / MIB) * MIB
    sized = replace(sized, overhead_bytes=overhead)
    sized_layout = layout_for(sized, load)
    current = conf.executor_memory_bytes
    if heap < current:
        change = f"can shrink from {format_size(current)}"
    elif heap > current:
        change = f"grow from {format_size(current)}"
    else:
        change = "keep"
    return Recommendation(
        executor_memory_bytes=heap,
        executor_memory=f"{heap // MIB}m",
        target_utilization=target,
        utilization_at_recommended=per_executor_usage(sized, load, sized_layout).utilization,
        memory_overhead_bytes=overhead,
        container_bytes=sized_layout.container_bytes,
        change=change,
    )


def _notes(conf: MemoryConf, load: MemoryLoad, layout: ExecutorLayout, usage: Usage) -> tuple[str, ...]:
    notes: list[str] = []
    if conf.state_store is StateStoreKind.HDFS and usage.required_bytes > 0:
        share = usage.state_on_heap_bytes / usage.required_bytes
        if share >= 0.5:
            notes.append(
                f"HDFS-backed state is {share:.0%} of the required execution memory: the RocksDB state store "
                "keeps it off the heap (checkpoint.state_store = 'rocksdb')"
            )
    if usage.state_on_heap_bytes > layout.usable_bytes:
        # Measured (docs/benchmarks/memory_breaking_point.md, 1g heap): runs lived with reported state up to
        # 0.86 x heap and failed with OutOfMemoryError a few percent above, so past the usable heap the end is near.
        notes.append(
            f"HDFS-backed state per executor ({format_size(usage.state_on_heap_bytes)}) is past the usable heap "
            f"({format_size(layout.usable_bytes)}): expect OutOfMemoryError as it nears the whole heap"
        )
    native = layout.rocksdb_native_bytes
    if native > layout.overhead_bytes:
        notes.append(
            f"RocksDB needs about {format_size(native)} of native memory per executor but "
            f"spark.executor.memoryOverhead is {format_size(layout.overhead_bytes)}: raise the overhead "
            "or cap RocksDB (checkpoint.bounded_memory_mb)"
        )
    if conf.state_store is StateStoreKind.ROCKSDB and conf.rocksdb_bounded_bytes is None and load.state_bytes > 0:
        notes.append("RocksDB memory is unbounded: its native memory is estimated from the reported state size")
    if not any((load.state_bytes, load.shuffle_bytes, load.sort_bytes)):
        notes.append("no load given: pass --state-bytes/--shuffle-bytes/--sort-bytes or --from-log/--from-rest")
    return tuple(notes)


def plan_memory(
    conf: MemoryConf,
    load: MemoryLoad,
    scale: float | None = None,
    target: float = DEFAULT_TARGET_UTILIZATION,
) -> MemoryPlan:
    """Lay out an executor, compare the load with its execution memory, project and size it."""
    if not 0 < target <= 1:
        msg = f"--target must be in (0, 1], not {target}"
        raise UsageError(msg)
    if scale is not None and scale <= 0:
        msg = f"--scale must be positive, not {scale}"
        raise UsageError(msg)
    layout = layout_for(conf, load)
    per_executor = per_executor_usage(conf, load, layout)
    projection = None
    if scale is not None:
        scaled = load.scaled(scale)
        scaled_usage = per_executor_usage(conf, scaled, layout_for(conf, scaled))
        projection = Projection(
            scale=scale,
            load=scaled,
            per_executor=scaled_usage,
            cluster=cluster_usage(scaled_usage, conf.executors),
            verdict=scaled_usage.verdict,
            recommendation=recommend(conf, scaled, target),
        )
    return MemoryPlan(
        conf=conf,
        load=load,
        layout=layout,
        per_executor=per_executor,
        cluster=cluster_usage(per_executor, conf.executors),
        verdict=per_executor.verdict,
        recommendation=recommend(conf, load, target),
        projection=projection,
        notes=_notes(conf, load, layout, per_executor),
    )
