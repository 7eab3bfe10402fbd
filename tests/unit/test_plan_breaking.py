"""The break point: HDFS-backed state against the heap, RocksDB against the container."""

from __future__ import annotations

import math

import pytest

from tidemark.config.model import StateStoreKind
from tidemark.sizing.breaking import MemoryLimit, break_point, solve_keys
from tidemark.sizing.memory import MemoryConf
from tidemark.sizing.resident import (
    JVM_NATIVE_BYTES,
    ROCKSDB_BLOCK_CACHE_BYTES,
    ROCKSDB_BOUNDED_BYTES_PER_KEY,
    RowShape,
    Workload,
    hdfs_footprint,
    rocksdb_footprint,
)

GB = 1024**3
MB = 1024**2
SHAPE = RowShape(key_bytes=24, value_bytes=16)


def test_solve_keys_finds_the_crossing_or_says_never() -> None:
    assert solve_keys(lambda k: 100 + 3 * k, 1000) == pytest.approx(300, abs=1)
    assert solve_keys(lambda k: 2000 + k, 1000) == 0
    assert solve_keys(lambda k: 10.0, 1000) is None


def test_hdfs_breaks_where_the_peak_reaches_the_heap() -> None:
    workload = Workload(keys=100_000, batch_rows=50_000, updated_per_batch=10_000)
    conf = MemoryConf(executor_memory_bytes=1 * GB)
    point = break_point(conf, SHAPE, workload)
    footprint = hdfs_footprint(SHAPE, workload, 1 * GB)
    assert point.limit is MemoryLimit.HEAP
    assert point.limit_bytes == 1 * GB
    assert point.keys_at_break == pytest.approx((1 * GB - footprint.fixed_bytes) / footprint.per_key_bytes, abs=1)
    assert point.peak_bytes_now == footprint.peak_bytes(100_000)
    assert point.used_share_now == pytest.approx(footprint.peak_bytes(100_000) / GB)
    assert point.fits


def test_hdfs_break_grows_by_one_gib_over_the_bytes_per_key() -> None:
    workload = Workload(keys=0)
    one = break_point(MemoryConf(executor_memory_bytes=1 * GB), SHAPE, workload)
    two = break_point(MemoryConf(executor_memory_bytes=2 * GB), SHAPE, workload)
    assert one.keys_at_break is not None and two.keys_at_break is not None
    assert two.keys_at_break - one.keys_at_break == pytest.approx(GB / one.per_key_bytes, abs=2)


def test_cluster_keys_are_per_executor_keys_times_executors() -> None:
    conf = MemoryConf(executor_memory_bytes=4 * GB, executors=3)
    point = break_point(conf, SHAPE, Workload(keys=0))
    assert point.keys_at_break is not None
    assert point.cluster_keys_at_break == pytest.approx(3 * point.keys_at_break)


def test_more_retained_versions_break_earlier() -> None:
    conf = MemoryConf(executor_memory_bytes=2 * GB)
    two = break_point(conf, SHAPE, Workload(keys=0), retained_versions=2)
    five = break_point(conf, SHAPE, Workload(keys=0), retained_versions=5)
    assert five.keys_at_break is not None and two.keys_at_break is not None
    assert five.keys_at_break < two.keys_at_break


def _rocksdb(heap: int, bounded: int | None, overhead: int | None = None) -> MemoryConf:
    return MemoryConf(
        executor_memory_bytes=heap,
        state_store=StateStoreKind.ROCKSDB,
        rocksdb_bounded_bytes=bounded,
        overhead_bytes=overhead,
    )


def test_bounded_rocksdb_needs_heap_plus_jvm_native_plus_cap_and_no_key_count_breaks_it() -> None:
    conf = _rocksdb(1 * GB, 256 * MB, overhead=700 * MB)
    point = break_point(conf, SHAPE, Workload(keys=10**9))
    assert point.limit is MemoryLimit.CONTAINER
    assert point.limit_bytes == 1 * GB + 700 * MB
    assert point.peak_bytes_now == 1 * GB + JVM_NATIVE_BYTES + 256 * MB
    assert point.fits
    assert point.keys_at_break is None


def test_bounded_rocksdb_past_the_container_says_how_much_overhead_is_missing() -> None:
    conf = _rocksdb(1 * GB, 256 * MB)  # default overhead 384 MB
    point = break_point(conf, SHAPE, Workload(keys=0))
    shortfall = 1 * GB + JVM_NATIVE_BYTES + 256 * MB - (1 * GB + 384 * MB)
    assert not point.fits
    assert point.keys_at_break == 0
    assert f"memoryOverhead >= {(384 * MB + shortfall) // MB}m" in point.advice
    room = (1 * GB + 384 * MB - 1 * GB - JVM_NATIVE_BYTES) // MB
    assert f"bounded_memory_mb = {room}" in point.advice


def test_container_override_replaces_spark_container() -> None:
    point = break_point(_rocksdb(1 * GB, 256 * MB), SHAPE, Workload(keys=0), container_bytes=3 * GB)
    assert point.limit_bytes == 3 * GB
    assert point.fits


def test_unbounded_rocksdb_breaks_where_native_memory_fills_the_container() -> None:
    conf = _rocksdb(1 * GB, None, overhead=600 * MB)
    workload = Workload(keys=0, state_instances=2)
    point = break_point(conf, SHAPE, workload)
    native = rocksdb_footprint(None, workload, SHAPE)
    assert point.keys_at_break is not None
    need = 1 * GB + JVM_NATIVE_BYTES + native.rocksdb_bytes(point.keys_at_break)
    assert need == pytest.approx(1 * GB + 600 * MB, rel=1e-6)
    assert native.cache_bytes == 2 * ROCKSDB_BLOCK_CACHE_BYTES


def test_bounded_rocksdb_with_too_few_bytes_a_key_says_what_cap_to_set() -> None:
    """Memory holds, but 10 M keys in 256 MB crawled in the benchmark: the advice asks for a larger cap."""
    conf = _rocksdb(4 * GB, 256 * MB, overhead=2 * GB)
    crowded = break_point(conf, SHAPE, Workload(keys=10_000_000))
    assert crowded.fits and crowded.keys_at_break is None
    wanted_mb = math.ceil(10_000_000 * ROCKSDB_BOUNDED_BYTES_PER_KEY / MB)
    assert f"checkpoint.bounded_memory_mb = {wanted_mb} or more" in crowded.advice
    assert "27 B a key" in crowded.advice
    roomy = break_point(conf, SHAPE, Workload(keys=1_000_000))  # 268 B a key: ran at 1 M keys
    assert roomy.advice == "nothing to change: state beyond the cap goes to local disk"
