"""What state keeps resident: UnsafeRow sizes, the HDFS heap footprint, RocksDB's native footprint."""

from __future__ import annotations

import pytest

from tidemark.sizing.resident import (
    BATCH_ROW_OVERHEAD_BYTES,
    BATCH_WORKING_FACTOR,
    HDFS_MAP_ENTRY_BYTES,
    HDFS_MAPS_IN_FLIGHT,
    HDFS_ROW_OVERHEAD_BYTES,
    HDFS_VALUE_COPY_OVERHEAD_BYTES,
    JVM_BASE_HEAP_BYTES,
    ROCKSDB_BLOCK_CACHE_BYTES,
    ROCKSDB_INDEX_FILTER_BYTES_PER_KEY,
    ROCKSDB_MAX_WRITE_BUFFERS,
    ROCKSDB_MEMTABLE_ENTRY_BYTES,
    ROCKSDB_WRITE_BUFFER_BYTES,
    UNCOMPRESSED_OOPS_FACTOR,
    RowShape,
    Workload,
    hdfs_footprint,
    rocksdb_footprint,
    shape_from_version_bytes,
    unsafe_row_bytes,
)

GB = 1024**3
MB = 1024**2


@pytest.mark.parametrize(
    ("fields", "variable", "expected"),
    [
        (1, [], 8 + 8),  # a count: null bits + one long
        (1, [8], 8 + 8 + 8),  # "k1234567"
        (1, [9], 8 + 8 + 16),  # a ninth character pads to the next 8 bytes
        (4, [8, 9], 8 + 4 * 8 + 8 + 16),
        (65, [], 16 + 65 * 8),  # a second word of null bits past 64 fields
        (0, [], 0),
    ],
)
def test_unsafe_row_bytes(fields: int, variable: list[int], expected: int) -> None:
    assert unsafe_row_bytes(fields, variable) == expected


SHAPE = RowShape(key_bytes=24, value_bytes=16)


def test_hdfs_footprint_counts_one_row_and_one_entry_per_map() -> None:
    footprint = hdfs_footprint(SHAPE, Workload(keys=1000), 1 * GB, retained_versions=2)
    maps = 2 + HDFS_MAPS_IN_FLIGHT
    assert footprint.maps_in_flight == HDFS_MAPS_IN_FLIGHT
    assert footprint.per_key_bytes == 40 + HDFS_ROW_OVERHEAD_BYTES + maps * HDFS_MAP_ENTRY_BYTES
    assert footprint.fixed_bytes == JVM_BASE_HEAP_BYTES
    assert footprint.peak_bytes(1000) == JVM_BASE_HEAP_BYTES + 1000 * footprint.per_key_bytes


def test_each_retained_version_adds_one_map_entry_per_key() -> None:
    one = hdfs_footprint(SHAPE, Workload(keys=0), 1 * GB, retained_versions=1)
    three = hdfs_footprint(SHAPE, Workload(keys=0), 1 * GB, retained_versions=3)
    assert three.per_key_bytes - one.per_key_bytes == 2 * HDFS_MAP_ENTRY_BYTES


def test_updates_keep_a_value_copy_per_retained_version() -> None:
    workload = Workload(keys=10_000, batch_rows=5_000, updated_per_batch=4_000)
    footprint = hdfs_footprint(SHAPE, workload, 2 * GB, retained_versions=2)
    expected = 2 * 4_000 * (16 + HDFS_VALUE_COPY_OVERHEAD_BYTES)
    assert footprint.updated_copies_bytes == expected
    assert footprint.fixed_bytes == JVM_BASE_HEAP_BYTES + footprint.batch_working_bytes + expected


def test_batch_working_memory_grows_with_the_batch_and_its_row_size() -> None:
    small = hdfs_footprint(SHAPE, Workload(keys=0, batch_rows=100_000), 1 * GB)
    wide = hdfs_footprint(RowShape(64, 64), Workload(keys=0, batch_rows=200_000), 1 * GB)
    assert small.batch_working_bytes == 100_000 * BATCH_WORKING_FACTOR * (40 + BATCH_ROW_OVERHEAD_BYTES)
    assert wide.batch_working_bytes == 200_000 * BATCH_WORKING_FACTOR * (128 + BATCH_ROW_OVERHEAD_BYTES)


def test_heaps_of_32_gib_lose_compressed_oops() -> None:
    small = hdfs_footprint(SHAPE, Workload(keys=0), 31 * GB)
    large = hdfs_footprint(SHAPE, Workload(keys=0), 32 * GB)
    assert small.per_key_bytes - 40 == pytest.approx((large.per_key_bytes - 40) / UNCOMPRESSED_OOPS_FACTOR)


def test_shape_from_size_estimator_takes_off_the_row_and_entry_overheads() -> None:
    per_key = 40 + HDFS_ROW_OVERHEAD_BYTES + HDFS_MAP_ENTRY_BYTES
    shape = shape_from_version_bytes(per_key)
    assert shape.data_bytes == pytest.approx(40)
    assert shape.key_bytes == shape.value_bytes
    assert shape_from_version_bytes(10).data_bytes == 0


def test_bounded_rocksdb_is_its_cap_whatever_the_keys() -> None:
    native = rocksdb_footprint(256 * MB, Workload(keys=5, state_instances=8), SHAPE)
    assert native.bounded
    assert native.rocksdb_bytes(0) == native.rocksdb_bytes(10**9) == 256 * MB


def test_unbounded_rocksdb_grows_per_instance_and_per_key_until_memtables_are_full() -> None:
    workload = Workload(keys=0, state_instances=4)
    native = rocksdb_footprint(None, workload, SHAPE)
    caches = 4 * ROCKSDB_BLOCK_CACHE_BYTES
    per_key = 40 + ROCKSDB_MEMTABLE_ENTRY_BYTES
    assert native.rocksdb_bytes(1000) == caches + 1000 * per_key + 1000 * ROCKSDB_INDEX_FILTER_BYTES_PER_KEY
    full = 4 * ROCKSDB_WRITE_BUFFER_BYTES * ROCKSDB_MAX_WRITE_BUFFERS
    keys = 10**8
    assert native.rocksdb_bytes(keys) == caches + full + keys * ROCKSDB_INDEX_FILTER_BYTES_PER_KEY


def test_unbounded_rocksdb_without_row_sizes_takes_the_memtables_as_full() -> None:
    native = rocksdb_footprint(None, Workload(keys=0, state_instances=2))
    full = 2 * ROCKSDB_WRITE_BUFFER_BYTES * ROCKSDB_MAX_WRITE_BUFFERS
    assert native.memtable_bytes_per_key is None
    assert native.rocksdb_bytes(1) == 2 * ROCKSDB_BLOCK_CACHE_BYTES + full + ROCKSDB_INDEX_FILTER_BYTES_PER_KEY
    assert native.rocksdb_bytes(0) == 2 * ROCKSDB_BLOCK_CACHE_BYTES
