"""What a stateful query keeps resident: HDFS-backed state on the JVM heap, RocksDB state in native memory.

The constants marked "measured" come from `benchmarks/planner_break.py calibrate` (live heap after two
System.gc() calls between batches, pyspark 4.1.1, Java 17 G1, compressed oops) and are explained in
docs/plan.md; the others are Spark's or RocksDB's defaults.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIB = 1024**2

# --- HDFS-backed store: ConcurrentHashMap<UnsafeRow, UnsafeRow> per loaded version ---------------------------
# measured: two UnsafeRow objects and the headers of their two byte[] per stored row (Java's layout says 112
# bytes with compressed oops; 116 and 113 bytes were measured for the two row shapes of the benchmark).
HDFS_ROW_OVERHEAD_BYTES = 115
# measured: one map's node and table slots per key (54.4 and 54.6 bytes per key and map in the two shapes).
HDFS_MAP_ENTRY_BYTES = 54
# measured: an update keeps the new value row beside the old one while an older version still holds it
# (the UnsafeRow and byte[] headers, 56 bytes, plus about 30 bytes the layout does not account for: 90 and 83
# bytes were measured).
HDFS_VALUE_COPY_OVERHEAD_BYTES = 86
# Without compressed oops (heaps of 32 GiB and more) headers and references grow (12 -> 16 and 4 -> 8 bytes):
# rows by about 1.3x, map nodes 1.5x, table slots 2x. Estimated from the layout, not measured.
UNCOMPRESSED_OOPS_FACTOR = 1.45
COMPRESSED_OOPS_MAX_HEAP = 32 * 1024**3
# spark.sql.streaming.maxBatchesToRetainInMemory
DEFAULT_RETAINED_VERSIONS = 2
# During a batch each task holds two more copies of the newest map: the read store of StateStoreRestoreExec and
# the write store StateStoreSaveExec upgrades it to (HDFSBackedStateStoreProvider copies the map for each; both
# share the row objects, not the map nodes). Read off the pyspark 4.1.1 classes.
HDFS_MAPS_IN_FLIGHT = 2
# measured: live heap of the local[2] JVM with Spark, the session and a started query, before any state.
JVM_BASE_HEAP_BYTES = 45 * MIB
# Heap a batch needs beyond the state: the map-side and final aggregations hold each of the batch's keys with its
# buffer (an UnsafeRow pair plus about 32 bytes of hash map), and shuffle buffers hold the rows again. Modelled
# as BATCH_WORKING_FACTOR x (key + value + 32 bytes) per input row of the executor's batch; the factor is fitted
# on one breaking-point cell of benchmarks/planner_break.py (see docs/plan.md).
BATCH_ROW_OVERHEAD_BYTES = 32
BATCH_WORKING_FACTOR = 0.54

# --- RocksDB: native memory outside the heap ----------------------------------------------------------------
# Spark's RocksDB defaults (RocksDBConf): per-instance block cache 8 MB when memory is unbounded; RocksDB's
# write buffer 64 MB x 2; bounded memory: one LRU cache of maxMemoryUsageMB per executor that also carries the
# memtables and the index and filter blocks.
ROCKSDB_BLOCK_CACHE_BYTES = 8 * MIB
ROCKSDB_WRITE_BUFFER_BYTES = 64 * MIB
ROCKSDB_MAX_WRITE_BUFFERS = 2
# Bloom filter (10 bits a key) and index entries outside the cache when memory is unbounded, per key.
ROCKSDB_INDEX_FILTER_BYTES_PER_KEY = 2.5
# Bounded memory is one cache for data, memtables, index and filter blocks. Measured (benchmarks/state_store.py,
# BENCHMARKS.md): 1 M keys in 256 MB (268 B a key) and 10 M keys in 1,024 and 512 MB (107 and 54 B a key) ran;
# 10 M keys in 256 MB (27 B a key) crawled (one batch in 30 minutes, the task threads in RocksDB.get). Below
# this many bytes a key, plan for the cap to be raised (a margin over the lowest point measured to run).
ROCKSDB_BOUNDED_BYTES_PER_KEY = 100
# measured (1g heap): the JVM's own native memory under a streaming query (metaspace, code cache, threads, GC
# tables, Netty buffers, malloc arenas): RSS minus the touched heap minus what RocksDB reports.
JVM_NATIVE_BYTES = 320 * MIB


@dataclass(frozen=True)
class RowShape:
    """Bytes of one state row as Spark stores it (UnsafeRow format: null bits, 8 bytes a field, then data)."""

    key_bytes: float
    value_bytes: float
    origin: str = "given"

    @property
    def data_bytes(self) -> float:
        """Key plus value."""
        return self.key_bytes + self.value_bytes


def unsafe_row_bytes(fields: int, variable_bytes: Sequence[float] = ()) -> int:
    """Size of an UnsafeRow: a null bitset of 8 bytes per 64 fields, 8 bytes a field, each variable part padded to 8."""
    bitset = 8 * math.ceil(fields / 64) if fields else 0
    return bitset + 8 * fields + sum(8 * math.ceil(v / 8) for v in variable_bytes)


@dataclass(frozen=True)
class Workload:
    """What one executor's state does per batch."""

    keys: float
    batch_rows: float = 0.0
    updated_per_batch: float = 0.0
    state_instances: int = 1


@dataclass(frozen=True)
class HeapFootprint:
    """HDFS-backed state at the peak of a batch: bytes that do not depend on the key count, and bytes per key."""

    fixed_bytes: float
    per_key_bytes: float
    retained_versions: int
    maps_in_flight: int
    jvm_base_bytes: float
    batch_working_bytes: float
    updated_copies_bytes: float

    def peak_bytes(self, keys: float) -> float:
        """Live heap at the peak of a batch with this many keys."""
        return self.fixed_bytes + keys * self.per_key_bytes


def oops_factor(heap_bytes: int) -> float:
    """How much larger object headers and references are: 1 below 32 GiB (compressed oops), more above."""
    return 1.0 if heap_bytes < COMPRESSED_OOPS_MAX_HEAP else UNCOMPRESSED_OOPS_FACTOR


def hdfs_footprint(
    shape: RowShape,
    workload: Workload,
    heap_bytes: int,
    retained_versions: int = DEFAULT_RETAINED_VERSIONS,
) -> HeapFootprint:
    """The heap HDFS-backed state needs at the peak of a batch, as a fixed part plus a part per key.

    At the peak a task holds the retained versions plus the maps in flight; they share unchanged rows, so each
    key costs one row and a map entry per map. Each of the last `retained_versions` batches' updates keeps one
    more value row alive.
    """
    factor = oops_factor(heap_bytes)
    maps = retained_versions + HDFS_MAPS_IN_FLIGHT
    per_key = shape.data_bytes + factor * (HDFS_ROW_OVERHEAD_BYTES + maps * HDFS_MAP_ENTRY_BYTES)
    copies = (
        retained_versions * workload.updated_per_batch * (shape.value_bytes + factor * HDFS_VALUE_COPY_OVERHEAD_BYTES)
    )
    working = workload.batch_rows * BATCH_WORKING_FACTOR * (shape.data_bytes + BATCH_ROW_OVERHEAD_BYTES)
    return HeapFootprint(
        fixed_bytes=JVM_BASE_HEAP_BYTES + working + copies,
        per_key_bytes=per_key,
        retained_versions=retained_versions,
        maps_in_flight=HDFS_MAPS_IN_FLIGHT,
        jvm_base_bytes=JVM_BASE_HEAP_BYTES,
        batch_working_bytes=working,
        updated_copies_bytes=copies,
    )


def shape_from_version_bytes(bytes_per_key: float, value_share: float = 0.5) -> RowShape:
    """Row sizes from stateOnCurrentVersionSizeBytes / rows (one map with its rows, per key).

    Spark's SizeEstimator samples the map, so this is rougher than sizes read from the checkpoint; the split
    between key and value is not known from it and taken as value_share of the data.
    """
    data = max(0.0, bytes_per_key - HDFS_ROW_OVERHEAD_BYTES - HDFS_MAP_ENTRY_BYTES)
    return RowShape(data * (1 - value_share), data * value_share, origin="progress log (SizeEstimator)")


@dataclass(frozen=True)
class NativeFootprint:
    """RocksDB's native memory on one executor, and the JVM's own, outside the heap."""

    cache_bytes: float
    memtable_cap_bytes: float
    memtable_bytes_per_key: float | None  # None: row sizes unknown, memtables taken as full
    index_filter_bytes_per_key: float
    bounded: bool
    jvm_native_bytes: float

    def rocksdb_bytes(self, keys: float) -> float:
        """RocksDB's native memory with this many keys on the executor."""
        if keys <= 0:
            memtables = 0.0
        elif self.memtable_bytes_per_key is None:
            memtables = self.memtable_cap_bytes
        else:
            memtables = min(self.memtable_cap_bytes, keys * self.memtable_bytes_per_key)
        return self.cache_bytes + memtables + keys * self.index_filter_bytes_per_key


# RocksDB's skiplist memtable spends about this much per entry besides the key and value.
ROCKSDB_MEMTABLE_ENTRY_BYTES = 30


def rocksdb_footprint(
    bounded_bytes: int | None,
    workload: Workload,
    shape: RowShape | None = None,
) -> NativeFootprint:
    """RocksDB's native memory: the bounded cache when bounded, else per instance caches, memtables and filters.

    Bounded, one cache per executor carries blocks, memtables and index and filter blocks, so the total stays
    at the cap whatever the key count. Unbounded, each open instance has its own block cache and may fill a
    pair of write buffers (flushed when full or when Spark takes a snapshot), and bloom filters and indexes
    grow with the keys outside any cache.
    """
    jvm_native = float(JVM_NATIVE_BYTES)
    if bounded_bytes is not None:
        return NativeFootprint(float(bounded_bytes), 0.0, 0.0, 0.0, True, jvm_native)
    instances = max(1, workload.state_instances)
    # Without the row size, assume each instance's memtables fill up (the upper bound).
    per_key = (shape.data_bytes + ROCKSDB_MEMTABLE_ENTRY_BYTES) if shape is not None else None
    return NativeFootprint(
        cache_bytes=float(instances * ROCKSDB_BLOCK_CACHE_BYTES),
        memtable_cap_bytes=float(instances * ROCKSDB_WRITE_BUFFER_BYTES * ROCKSDB_MAX_WRITE_BUFFERS),
        memtable_bytes_per_key=per_key,
        index_filter_bytes_per_key=ROCKSDB_INDEX_FILTER_BYTES_PER_KEY,
        bounded=False,
        jvm_native_bytes=jvm_native,
    )
