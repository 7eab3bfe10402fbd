"""Where an executor runs out of memory as state grows: the heap for HDFS-backed state, the container for RocksDB."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tidemark.compat import StrEnum
from tidemark.config.model import StateStoreKind
from tidemark.sizing.memory import MemoryConf, layout_for
from tidemark.sizing.resident import (
    DEFAULT_RETAINED_VERSIONS,
    ROCKSDB_BOUNDED_BYTES_PER_KEY,
    HeapFootprint,
    NativeFootprint,
    RowShape,
    Workload,
    hdfs_footprint,
    rocksdb_footprint,
)

# Key counts beyond this are "never" for the search (state that large is disk-bound long before).
_KEYS_SEARCH_LIMIT = 1e13


class MemoryLimit(StrEnum):
    """Which limit the growing state runs into."""

    HEAP = "heap"
    CONTAINER = "container"


@dataclass(frozen=True)
class BreakPoint:
    """The key count at which one executor runs out of memory, and how full it is now.

    keys_at_break is None when state growth does not break the executor (RocksDB with bounded memory: more
    keys go to disk, not to memory); `fits` then says whether the fixed needs fit the limit at all.
    """

    state_store: StateStoreKind
    limit: MemoryLimit
    limit_bytes: int
    shape: RowShape
    workload: Workload
    executors: int
    peak_bytes_now: float
    used_share_now: float
    per_key_bytes: float
    keys_at_break: float | None
    cluster_keys_at_break: float | None
    fits: bool
    heap: HeapFootprint | None
    native: NativeFootprint | None
    explanation: str
    advice: str


def solve_keys(need_at: Callable[[float], float], limit: float) -> float | None:
    """The key count where need_at(keys), growing with keys, reaches limit; 0 when already there, None if never."""
    if need_at(0.0) >= limit:
        return 0.0
    low, high = 0.0, 1.0
    while need_at(high) < limit:
        high *= 2
        if high > _KEYS_SEARCH_LIMIT:
            return None
    for _ in range(200):
        middle = (low + high) / 2
        if need_at(middle) < limit:
            low = middle
        else:
            high = middle
        if high - low <= max(1.0, high * 1e-9):
            break
    return low


def container_limit_bytes(conf: MemoryConf) -> int:
    """What the cluster manager allows one executor: heap + memoryOverhead + off-heap + PySpark memory."""
    return layout_for(conf).container_bytes


def _hdfs_break(conf: MemoryConf, shape: RowShape, workload: Workload, retained: int) -> BreakPoint:
    heap = conf.executor_memory_bytes
    footprint = hdfs_footprint(shape, workload, heap, retained)
    peak_now = footprint.peak_bytes(workload.keys)
    keys = solve_keys(footprint.peak_bytes, heap)
    per_gib = 1024**3 / footprint.per_key_bytes
    advice = (
        f"each GB more heap holds about {per_gib:,.0f} more keys per executor; more executors spread the keys; "
        "RocksDB (checkpoint.state_store = 'rocksdb') moves the state off the heap"
    )
    explanation = (
        f"HDFS-backed state lives on the heap: {retained} retained version(s) plus the read and write copies "
        f"of the newest map during a batch, {footprint.per_key_bytes:.0f} bytes per key; the JVM, the batch "
        "and updated rows kept for older versions take the rest"
    )
    return BreakPoint(
        state_store=StateStoreKind.HDFS,
        limit=MemoryLimit.HEAP,
        limit_bytes=heap,
        shape=shape,
        workload=workload,
        executors=conf.executors,
        peak_bytes_now=peak_now,
        used_share_now=peak_now / heap,
        per_key_bytes=footprint.per_key_bytes,
        keys_at_break=keys,
        cluster_keys_at_break=None if keys is None else keys * conf.executors,
        fits=footprint.fixed_bytes < heap,
        heap=footprint,
        native=None,
        explanation=explanation,
        advice=advice,
    )


def _rocksdb_break(
    conf: MemoryConf, shape: RowShape, workload: Workload, container: int, row_sizes_known: bool
) -> BreakPoint:
    heap = conf.executor_memory_bytes
    native = rocksdb_footprint(conf.rocksdb_bounded_bytes, workload, shape if row_sizes_known else None)
    # The heap counts whole: the container has to hold it once the JVM has grown it to -Xmx.
    fixed = heap + conf.off_heap_bytes + conf.pyspark_memory_bytes + native.jvm_native_bytes

    def need(keys: float) -> float:
        return fixed + native.rocksdb_bytes(keys)

    overhead = container - heap - conf.off_heap_bytes - conf.pyspark_memory_bytes
    room = container - fixed  # what RocksDB may use

    if native.bounded:
        # The cache fills up to its cap whatever the key count (blocks read, memtables, index and filters).
        peak_now = fixed + native.cache_bytes
        fits = peak_now <= container
        keys = None if fits else 0.0
        per_key = 0.0
        explanation = (
            f"RocksDB memory is bounded at {native.cache_bytes / 2**20:.0f} MB per executor: more keys go to "
            "disk, so the break is the container (heap + JVM native + RocksDB cap), not the key count"
        )
        if fits:
            advice = "nothing to change: state beyond the cap goes to local disk"
        else:
            advice = _container_advice(overhead, peak_now - container, room)
        wanted = workload.keys * ROCKSDB_BOUNDED_BYTES_PER_KEY
        if wanted > native.cache_bytes:
            # Memory holds, but the cache gets too small to keep index and filter blocks: reads go to disk.
            advice += (
                f"; but {workload.keys:,.0f} keys in {native.cache_bytes / 2**20:.0f} MB is "
                f"{native.cache_bytes / workload.keys:.0f} B a key, below the "
                f"{ROCKSDB_BOUNDED_BYTES_PER_KEY} B a key batches were measured to need (10 M keys in 256 MB "
                f"crawled): set checkpoint.bounded_memory_mb = {math.ceil(wanted / 2**20)} or more, and the "
                "container to match, or spread the keys over more executors"
            )
    else:
        peak_now = need(workload.keys)
        keys = solve_keys(need, container)
        fits = keys is None or keys > 0
        memtable = native.memtable_bytes_per_key or 0.0
        filling = workload.keys * memtable < native.memtable_cap_bytes
        per_key = native.index_filter_bytes_per_key + (memtable if filling else 0.0)
        explanation = (
            f"RocksDB memory is unbounded: {workload.state_instances} instance(s) on this executor, each with its "
            "own block cache and up to two 64 MB memtables, plus bloom filters and indexes per key; cap it with "
            "checkpoint.bounded_memory_mb"
        )
        advice = _container_advice(overhead, max(0.0, need(workload.keys) - container), room)
    return BreakPoint(
        state_store=StateStoreKind.ROCKSDB,
        limit=MemoryLimit.CONTAINER,
        limit_bytes=container,
        shape=shape,
        workload=workload,
        executors=conf.executors,
        peak_bytes_now=peak_now,
        used_share_now=peak_now / container,
        per_key_bytes=per_key,
        keys_at_break=keys,
        cluster_keys_at_break=None if keys is None else keys * conf.executors,
        fits=fits,
        heap=None,
        native=native,
        explanation=explanation,
        advice=advice,
    )


def _container_advice(overhead: float, shortfall: float, room: float) -> str:
    """Raise the overhead by the shortfall, or cap RocksDB at the room the container leaves."""
    mib = 2**20
    raise_to = f"spark.executor.memoryOverhead >= {math.ceil((overhead + shortfall) / mib)}m"
    if room >= 16 * mib:
        return f"{raise_to}, or checkpoint.bounded_memory_mb = {math.floor(room / mib)} (what the container leaves)"
    return f"{raise_to}: the container leaves RocksDB no room ({room / mib:,.0f} MB)"


def break_point(
    conf: MemoryConf,
    shape: RowShape,
    workload: Workload,
    retained_versions: int = DEFAULT_RETAINED_VERSIONS,
    container_bytes: int | None = None,
    row_sizes_known: bool = True,
) -> BreakPoint:
    """Where one executor runs out of memory as keys grow (workload is per executor).

    container_bytes replaces the container Spark would ask for (heap + overhead + off-heap + PySpark memory);
    without row sizes, RocksDB's unbounded memtables are taken as full.
    """
    if conf.state_store is StateStoreKind.HDFS:
        return _hdfs_break(conf, shape, workload, retained_versions)
    container = container_bytes if container_bytes is not None else container_limit_bytes(conf)
    return _rocksdb_break(conf, shape, workload, container, row_sizes_known)
