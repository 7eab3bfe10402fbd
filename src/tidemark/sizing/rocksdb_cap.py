"""RocksDB's memory cap sized to what the executor has and what the state needs (`bounded_memory_mb = "auto"`).

RocksDB's memory manager is one per JVM: one LRU cache of `maxMemoryUsageMB` for the block cache, the write
buffers (`writeBufferCacheRatio`: half, or 0.8 when a large state gets buffers that hold a batch,
`write_buffer_for`) and the index and filter blocks of every state store instance of
the executor, created by the first instance and never resized. So the cap is chosen once, when a run starts, and
a new run (a new process) picks a new one.

What the state needs (measured, BENCHMARKS.md "State store defaults", 10 M keys, every key updated every batch):
a task reads its partition's keys in random order, so the cache must hold the data blocks of the partitions the
executor works on at once (its cores). With the data of 2 partitions of 5 M keys each behind 256 MB (27 B a
key) every batch crawled; 512 MB (54 B) ran at 1.58x the HDFS-backed store, 1,024 MB (107 B) at 1.40x; 1 M keys
in 256 MB (268 B) ran normally. tidemark plans 100 B a key, a margin of 2 over the lowest point that ran. The
keys are counted only with row tracking on, so the need is also read from bytes: those rows took 17 B a key in
RocksDB's SST files (LZ4), so 100 B a key is about 6 bytes of cap per SST byte. Whichever is larger wins.

What the executor has: in local mode the machine (half of the memory left beside the heap and the JVM's own
native memory); on a cluster the container's memory overhead minus the JVM's own native memory. When the user
left `spark.executor.memoryOverhead` to Spark's default, tidemark asks for the overhead the cap needs instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidemark.config.rocksdb import MIN_WRITE_BUFFER_MB, most_write_buffer_mb
from tidemark.findings import Finding, Severity
from tidemark.sizing.memory import MIB, MemoryConf, overhead_for
from tidemark.sizing.resident import JVM_NATIVE_BYTES, ROCKSDB_BOUNDED_BYTES_PER_KEY

# measured: SST bytes a key of the benchmark's rows (a long key; count and sum), 1 M keys on 2 partitions, LZ4.
BENCHMARK_SST_BYTES_PER_KEY = 17
# Bytes of cap per byte of state in SST files: the 100 B a key over the 17 B of SST those keys took.
ROCKSDB_CAP_PER_SST_BYTE = ROCKSDB_BOUNDED_BYTES_PER_KEY / BENCHMARK_SST_BYTES_PER_KEY
# A run sized for today's state should survive growth until the next start.
GROWTH_HEADROOM = 1.5
# The cap of a cluster run that knows nothing of its state yet (a new checkpoint): tidemark's fixed default before.
START_CAP_BYTES = 256 * MIB
# The smallest cap Spark's memory manager is given (the config's minimum).
MIN_CAP_BYTES = 16 * MIB
# In local mode the machine is the container: RocksDB may take this share of what the heap and the JVM leave.
LOCAL_MACHINE_SHARE = 0.5
# Before the state is known, a share of the heap, which says how large a job its owner expects (the HDFS-backed
# store needed a 12 GB heap for the 10 M keys that RocksDB needed about 1 GB of cap for: a quarter leaves a margin
# of 3). A cap is an upper bound the LRU cache fills over time (blocks of compacted files stay until evicted), so
# it is not simply all the room.
HEAP_SHARE = 0.25
# Below this share of the need, batches crawl rather than slow down (27 B a key crawled, 54 B ran: half).
CRAWL_SHARE = 0.5


@dataclass(frozen=True)
class StateNeed:
    """What the state asks of one executor's cap, and the figures it came from."""

    need_bytes: float  # cap for the partitions an executor works on at once, margin included
    partitions: int
    active_partitions: int  # min(cores, partitions per executor)
    active_state_bytes: float  # SST bytes of the largest `active_partitions` partitions
    active_keys: int | None  # their keys, when Spark counted them
    total_state_bytes: float
    basis: str  # "keys" or "bytes": which rule gave the larger need


@dataclass(frozen=True)
class Room:
    """What one executor can give RocksDB, and why."""

    bytes: float
    local: bool
    overhead_bytes: int | None  # the container's memoryOverhead (cluster)
    overhead_default: bool  # True: Spark's default overhead, which tidemark may raise for the cap
    available_bytes: int | None  # local mode: the machine's available memory at the start
    explanation: str


@dataclass(frozen=True)
class CapPlan:
    """The cap a run starts with, and what it says about it."""

    cap_bytes: int
    chosen: str  # "auto" or "config"
    room: Room
    need: StateNeed | None
    memory_overhead_bytes: int | None  # the overhead tidemark sets for it (cluster, default overhead), else None
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def cap_mb(self) -> int:
        """The cap in whole MiB, as Spark's maxMemoryUsageMB takes it."""
        return max(1, self.cap_bytes // MIB)

    @property
    def write_buffer_mb(self) -> int:
        """Each store's write buffer under this cap for this state (writeBufferSizeMB)."""
        return write_buffer_for(self.cap_mb, self.need)

    def as_record(self) -> dict[str, object]:
        """The figures for the progress log's started line and `check`."""
        need = self.need
        return {
            "cap_bytes": self.cap_bytes,
            "chosen": self.chosen,
            "room_bytes": round(self.room.bytes),
            "room": self.room.explanation,
            "need_bytes": round(need.need_bytes) if need else None,
            "state_bytes": round(need.total_state_bytes) if need else None,
            "partitions": need.partitions if need else None,
            "active_partitions": need.active_partitions if need else None,
            "memory_overhead_bytes": self.memory_overhead_bytes,
            "write_buffer_mb": self.write_buffer_mb,
        }


def _mb(value: float) -> str:
    return f"{value / MIB:,.0f} MB"


def cap_for(sst_bytes: float, keys: int | None) -> float:
    """The cap that state of sst_bytes in SST files (and keys, when counted) needs: the larger of the two rules."""
    return max(sst_bytes * ROCKSDB_CAP_PER_SST_BYTE, float((keys or 0) * ROCKSDB_BOUNDED_BYTES_PER_KEY))


def write_buffer_for(cap_mb: int, need: StateNeed | None) -> int:
    """Each store's write buffer: one that holds a batch that updates every key of the largest store once, with
    room to grow (100 B a key of memtable, read from SST bytes as for the cap), within the cap's write-buffer share
    split over the stores worked at once; RocksDB's 64 MB when the state is small or unknown (a new checkpoint).
    Measured: 5 M keys a store, 614 MB: batches 8 % shorter than with 64 MB; 500 k keys a store given 153 MB
    (several batches in one memtable): 9 % longer, so a buffer is never sized larger than the state asks."""
    if need is None:
        return MIN_WRITE_BUFFER_MB
    per_store = cap_for(need.active_state_bytes / need.active_partitions, None) * GROWTH_HEADROOM
    most = most_write_buffer_mb(cap_mb, need.active_partitions)
    return max(MIN_WRITE_BUFFER_MB, min(most, math.ceil(per_store / MIB)))


def state_need(
    partition_bytes: Mapping[int, int],
    conf: MemoryConf,
    partition_keys: Mapping[int, int] | None = None,
) -> StateNeed | None:
    """The cap one executor needs for the state measured per partition (None when there is none)."""
    if not partition_bytes or not any(partition_bytes.values()):
        return None
    partitions = len(partition_bytes)
    per_executor = math.ceil(partitions / max(1, conf.executors))
    active = max(1, min(conf.cores, per_executor))
    largest = sorted(partition_bytes, key=lambda p: -partition_bytes[p])[:active]
    active_bytes = float(sum(partition_bytes[p] for p in largest))
    keys = None
    if partition_keys is not None and all(p in partition_keys for p in largest):
        keys = sum(partition_keys[p] for p in largest)
    need = cap_for(active_bytes, keys)
    return StateNeed(
        need_bytes=need,
        partitions=partitions,
        active_partitions=active,
        active_state_bytes=active_bytes,
        active_keys=keys,
        total_state_bytes=float(sum(partition_bytes.values())),
        basis="keys" if need > cap_for(active_bytes, None) else "bytes",
    )


def rocksdb_room(conf: MemoryConf, local: bool, available_bytes: int | None) -> Room:
    """What one executor can give RocksDB: a share of the machine (local) or the container's overhead."""
    if local:
        if available_bytes is None:
            return Room(float(START_CAP_BYTES), True, None, False, None, "machine memory unknown: the start cap")
        spare = max(0.0, available_bytes - conf.executor_memory_bytes - JVM_NATIVE_BYTES)
        return Room(
            LOCAL_MACHINE_SHARE * spare,
            True,
            None,
            False,
            available_bytes,
            f"half of what this machine's {_mb(available_bytes)} of available memory leaves beside the "
            f"{_mb(conf.executor_memory_bytes)} heap and {_mb(JVM_NATIVE_BYTES)} of JVM native memory",
        )
    overhead = overhead_for(conf)
    room = max(0.0, float(overhead - JVM_NATIVE_BYTES))
    default = conf.overhead_bytes is None
    where = "Spark's default" if default else "spark.executor.memoryOverhead"
    return Room(
        room,
        False,
        overhead,
        default,
        None,
        f"{where} of {_mb(overhead)} per executor minus {_mb(JVM_NATIVE_BYTES)} of the JVM's own native memory",
    )


def repartition_target(need: StateNeed, conf: MemoryConf, room: float) -> int | None:
    """Partitions that bring the need under room (tasks at once x state per partition), None when none would."""
    if room <= 0 or need.active_state_bytes <= 0:
        return None
    per_partition = need.need_bytes / need.active_partitions  # with the margin
    total = per_partition * need.partitions
    slots = max(1, conf.cores)
    wanted = math.ceil(total * slots / room)
    step = slots * max(1, conf.executors)
    target = math.ceil(wanted / step) * step
    if target <= need.partitions or target > 4096:
        return None
    return target


def _short_finding(need: StateNeed, room: Room, conf: MemoryConf, cap: int, checkpoint: str) -> Finding:
    state = (
        f"{need.active_partitions} partition(s) worked at once per executor hold {_mb(need.active_state_bytes)} of "
        f"RocksDB files" + (f" ({need.active_keys:,} keys)" if need.active_keys is not None else "")
    )
    message = (
        f"the state needs about {_mb(need.need_bytes)} of RocksDB memory per executor ({state}; "
        f"{ROCKSDB_BOUNDED_BYTES_PER_KEY} B a key, {ROCKSDB_CAP_PER_SST_BYTE:.1f} B per SST byte) but gets "
        f"{_mb(cap)}: {room.explanation}"
    )
    if cap < CRAWL_SHARE * need.need_bytes:
        message += "; below half of the need batches crawl (10 M keys in 256 MB: one batch in 30 minutes)"
    fixes: list[str] = []
    if room.local:
        fixes.append(
            f"free {_mb(need.need_bytes / LOCAL_MACHINE_SHARE - (room.bytes / LOCAL_MACHINE_SHARE))} more of this "
            "machine's memory (or give the driver a smaller heap)"
        )
    else:
        fixes.append(f"spark.executor.memoryOverhead >= {math.ceil((need.need_bytes + JVM_NATIVE_BYTES) / MIB)}m")
    target = repartition_target(need, conf, room.bytes)
    if target is not None:
        fixes.append(
            f"or spread the state: tidemark state repartition {checkpoint} --partitions {target} --apply "
            "(while the query is stopped)"
        )
    fixes.append(
        "or the HDFS-backed store for this size if the heap holds it (tidemark plan memory --state-store hdfs "
        f"--from-checkpoint {checkpoint}; move with tidemark state repartition {checkpoint} --partitions "
        f"{need.partitions} --state-store hdfs --apply)"
    )
    return Finding("ROCKSDB_CAP_SHORT", Severity.WARNING, message, "; ".join(fixes))


def plan_cap(
    conf: MemoryConf,
    local: bool,
    need: StateNeed | None,
    available_bytes: int | None = None,
    configured_mb: int | None = None,
    checkpoint: str = "CHECKPOINT",
) -> CapPlan:
    """The cap for a run: the configured one; else the largest of 256 MB, a quarter of the heap and what the state
    needs with room to grow, within what the executor can give. On a cluster's default overhead tidemark asks for
    the overhead instead (for 256 MB or what the state needs); a finding when the state needs more than it gets."""
    room = rocksdb_room(conf, local, available_bytes)
    overhead: int | None = None
    grown = need.need_bytes * GROWTH_HEADROOM if need is not None else 0.0
    if configured_mb is not None:
        cap = configured_mb * MIB
        chosen = "config"
    elif room.overhead_default:
        cap = math.ceil(max(float(START_CAP_BYTES), grown) / MIB) * MIB
        overhead = math.ceil((overhead_for(conf) + cap) / MIB) * MIB
        chosen = "auto"
    else:
        wanted = max(float(START_CAP_BYTES), HEAP_SHARE * conf.executor_memory_bytes, grown)
        cap = max(MIN_CAP_BYTES, math.floor(min(wanted, room.bytes) / MIB) * MIB)
        chosen = "auto"
    findings: list[Finding] = []
    if need is not None and need.need_bytes > cap:
        if configured_mb is not None:
            findings.append(
                Finding(
                    "ROCKSDB_CAP_BELOW_NEED",
                    Severity.WARNING,
                    f"checkpoint.bounded_memory_mb = {configured_mb} but the state needs about "
                    f"{_mb(need.need_bytes)} per executor ({need.active_partitions} partition(s) at once, "
                    f"{_mb(need.active_state_bytes)} of RocksDB files)",
                    f'checkpoint.bounded_memory_mb = {math.ceil(need.need_bytes * GROWTH_HEADROOM / MIB)}, or "auto"'
                    " (tidemark sizes it at every start), with the container to match",
                )
            )
        else:
            findings.append(_short_finding(need, room, conf, cap, checkpoint))
    return CapPlan(cap, chosen, room, need, overhead, tuple(findings))


def partition_sizes(
    stores: Sequence[tuple[int, int, int | None]],
) -> tuple[dict[int, int], dict[int, int] | None]:
    """Bytes and keys per partition from (partition, bytes, keys) per store; keys only when every store has them."""
    sizes: dict[int, int] = {}
    keys: dict[int, int] = {}
    counted = True
    for partition, size, count in stores:
        sizes[partition] = sizes.get(partition, 0) + size
        if count is None:
            counted = False
        else:
            keys[partition] = keys.get(partition, 0) + count
    return sizes, keys if counted else None
