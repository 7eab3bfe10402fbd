"""What a run starts with: the provider of a new checkpoint and RocksDB's cap, from file sizes (no JVM)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.config.model import StateStoreKind
from tidemark.formats import Checkpoint, state_size
from tidemark.sizing.memory import MIB
from tidemark.sizing.resident import JVM_NATIVE_BYTES
from tidemark.sizing.rocksdb_cap import LOCAL_MACHINE_SHARE, ROCKSDB_CAP_PER_SST_BYTE, state_need
from tidemark.sizing.store_start import plan_start

SPARK35 = Path(__file__).parents[1] / "fixtures" / "spark35"
GB = 1024**3


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / "checkpoint"
    shutil.copytree(SPARK35 / name, target)
    return target


def test_rocksdb_state_is_measured_from_the_snapshots_sst_list(tmp_path: Path) -> None:
    root = _copy("rocksdb_window", tmp_path)
    # A changelog after the snapshot (what changelog checkpointing writes between snapshots).
    (root / "state/0/0/4.changelog").write_bytes(b"x" * 1000)
    size = state_size(Checkpoint.open(str(root)), version=4)
    assert size.provider == "rocksdb"
    by_partition = {s.partition: s for s in size.stores}
    first = by_partition[0]
    assert first.snapshot_version == 3
    assert first.data_bytes == 1281 + 1304 + 1246  # the sizeBytes the zip's metadata lists
    assert first.keys == 6  # numKeys, counted by this Spark 3.5 checkpoint
    assert first.replay_bytes == 1000
    assert size.version == 4
    assert size.total_bytes == sum(s.data_bytes for s in size.stores)
    # The default version is what the latest committed batch (2) wrote: 3.
    assert state_size(Checkpoint.open(str(root))).version == 3


def test_hdfs_state_is_measured_from_its_files(tmp_path: Path) -> None:
    root = _copy("hdfs_window", tmp_path)
    size = state_size(Checkpoint.open(str(root)))
    assert size.provider == "hdfs"
    store = size.stores[0]
    assert store.snapshot_version is None and store.keys is None
    deltas = sum(p.stat().st_size for p in (root / "state/0/0").glob("*.delta") if int(p.stem) <= size.version)
    assert store.replay_bytes == store.estimate_bytes == deltas


def test_a_new_checkpoint_gets_rocksdb_and_what_the_machine_has(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, spark={"driver_memory": "2g"}))
    start = plan_start(config, available_bytes=10 * GB)
    assert start.state_store is StateStoreKind.ROCKSDB and start.store_chosen_by == "default"
    assert start.cap is not None and start.cap.need is None
    assert start.cap.room.bytes == LOCAL_MACHINE_SHARE * (10 * GB - 2 * GB - JVM_NATIVE_BYTES)
    assert start.cap.cap_bytes == 512 * MIB  # a quarter of the 2 GB heap, well within the room
    conf = start.config.spark_conf()
    assert conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "512"
    assert start.findings == ()
    record = start.as_record()
    assert record["state_store"] == "rocksdb"
    assert json.dumps(record)  # it goes into the progress log as is


@pytest.mark.parametrize(
    ("keys", "store"),
    [(20_000, StateStoreKind.ROCKSDB), (1_000_000, StateStoreKind.HDFS), (10_000_000, StateStoreKind.ROCKSDB)],
)
def test_the_expected_size_picks_the_provider_of_a_new_checkpoint(
    tmp_path: Path, keys: int, store: StateStoreKind
) -> None:
    config = load_config(
        write_config(tmp_path, spark={"driver_memory": "4g"}, checkpoint={"expected_state_keys": keys})
    )
    start = plan_start(config, available_bytes=16 * GB)
    assert start.state_store is store and start.store_chosen_by == "hint"
    assert start.config.checkpoint.state_store is store
    assert (start.cap is None) == (store is StateStoreKind.HDFS)
    # An explicit provider wins over the hint.
    pinned = load_config(
        write_config(
            tmp_path,
            spark={"driver_memory": "4g"},
            checkpoint={"expected_state_keys": keys, "state_store": "rocksdb"},
        )
    )
    assert plan_start(pinned, available_bytes=16 * GB).state_store is StateStoreKind.ROCKSDB


def test_an_existing_checkpoint_keeps_its_provider_and_sizes_the_cap_from_its_state(tmp_path: Path) -> None:
    root = _copy("rocksdb_window", tmp_path)
    config = load_config(write_config(tmp_path, checkpoint={"location": str(root), "state_store": "hdfs"}))
    start = plan_start(config, available_bytes=8 * GB)
    assert start.state_store is StateStoreKind.ROCKSDB and start.store_chosen_by == "checkpoint"
    assert start.config.checkpoint.state_store is StateStoreKind.ROCKSDB
    [fixed] = [f for f in start.findings if f.code == "STATE_STORE_FIXED"]
    assert f"tidemark state repartition {root} --partitions 2 --state-store hdfs --apply" in fixed.fix
    assert start.cap is not None and start.cap.need is not None
    measured = state_size(Checkpoint.open(str(root)))
    largest_two = sorted(measured.per_partition().values())[-2:]
    assert start.cap.need.basis == "bytes"
    assert start.cap.need.active_state_bytes == sum(largest_two)
    assert start.cap.need.need_bytes >= sum(largest_two) * ROCKSDB_CAP_PER_SST_BYTE
    # A small state keeps RocksDB's 64 MB write buffer (nothing set), whatever the cap; the user's own setting wins.
    assert start.cap.write_buffer_mb == 64
    assert "spark.sql.streaming.stateStore.rocksdb.writeBufferSizeMB" not in start.config.spark_conf()
    own = {"conf": {"spark.sql.streaming.stateStore.rocksdb.writeBufferSizeMB": "128"}}
    mine = plan_start(load_config(write_config(tmp_path, checkpoint={"location": str(root)}, spark=own)), 8 * GB)
    assert mine.config.spark_conf()["spark.sql.streaming.stateStore.rocksdb.writeBufferSizeMB"] == "128"


def test_a_hint_past_the_existing_store_says_how_to_move(tmp_path: Path) -> None:
    root = _copy("hdfs_window", tmp_path)
    grown = load_config(
        write_config(
            tmp_path,
            spark={"driver_memory": "2g"},
            checkpoint={"location": str(root), "expected_state_keys": 50_000_000},
        )
    )
    start = plan_start(grown, available_bytes=8 * GB)
    assert start.state_store is StateStoreKind.HDFS and start.cap is None  # the checkpoint's own, for this run
    [outgrown] = start.findings
    assert outgrown.code == "STATE_STORE_OUTGROWN" and "RocksDB keeps them off the heap" in outgrown.message
    assert f"tidemark state repartition {root} --partitions 2 --state-store rocksdb --apply" in outgrown.fix
    small = load_config(write_config(tmp_path, checkpoint={"location": str(root), "expected_state_keys": 1000}))
    assert plan_start(small, available_bytes=8 * GB).findings == ()  # both stores do at 1 k keys
    fits = load_config(
        write_config(
            tmp_path, spark={"driver_memory": "4g"}, checkpoint={"location": str(root), "expected_state_keys": 500_000}
        )
    )
    assert plan_start(fits, available_bytes=8 * GB).findings == ()


def test_a_configured_cap_is_passed_through(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, checkpoint={"bounded_memory_mb": 700}))
    start = plan_start(config, available_bytes=8 * GB)
    assert start.cap is not None and start.cap.cap_mb == 700 and start.cap.chosen == "config"
    assert start.config.spark_conf()["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "700"
    unbounded = plan_start(load_config(write_config(tmp_path, checkpoint={"bounded_memory_mb": "unbounded"})))
    assert unbounded.cap is None
    assert "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage" not in unbounded.config.spark_conf()


_ROCKSDB = "spark.sql.streaming.stateStore.rocksdb."


def test_without_a_state_to_size_them_rocksdb_keeps_its_write_buffers(tmp_path: Path) -> None:
    # A new checkpoint (nothing known) or a config turned into settings outside a run: RocksDB's own 64 MB buffer
    # and Spark's share, whatever the cap.
    start = plan_start(load_config(write_config(tmp_path, spark={"driver_memory": "12g"})), available_bytes=24 * GB)
    assert start.cap is not None and start.cap.cap_mb >= 3072 and start.cap.write_buffer_mb == 64
    for conf in (start.config.spark_conf(), load_config(write_config(tmp_path)).spark_conf()):
        assert not {f"{_ROCKSDB}writeBufferSizeMB", f"{_ROCKSDB}writeBufferCacheRatio"} & set(conf)


def test_a_cluster_on_the_default_overhead_asks_for_the_overhead(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, spark={"master": "spark://h:7077", "executor_memory": "4g"}))
    start = plan_start(config)
    assert start.cap is not None and start.cap.memory_overhead_bytes is not None
    overhead = start.config.spark_conf()["spark.executor.memoryOverhead"]
    assert overhead == f"{start.cap.memory_overhead_bytes // MIB}m"
    # Set by the user, the overhead is theirs: the cap fits it.
    path = write_config(tmp_path, spark={"master": "spark://h:7077", "executor_memory": "4g"})
    path.write_text(path.read_text() + '\n[spark.conf]\n"spark.executor.memoryOverhead" = "2g"\n')
    start = plan_start(load_config(path))
    assert start.config.spark_conf()["spark.executor.memoryOverhead"] == "2g"
    assert start.cap is not None and start.cap.cap_bytes == GB  # a quarter of the heap, within 2 GB - 320 MB
    path.write_text(path.read_text().replace('"2g"', '"512m"'))
    tight = plan_start(load_config(path))  # 512 MB of overhead leaves RocksDB 192 MB
    assert tight.cap is not None and tight.cap.cap_bytes == 512 * MIB - JVM_NATIVE_BYTES


def test_hdfs_state_past_half_the_heap_gets_the_move_to_rocksdb(tmp_path: Path) -> None:
    root = _copy("hdfs_window", tmp_path)
    monitor = tmp_path / "monitor"
    monitor.mkdir()
    progress = {
        "id": "q",
        "runId": "r",
        "batchId": 40,
        "batchDuration": 1000,
        "stateOperators": [
            {
                "operatorName": "stateStoreSave",
                "numRowsTotal": 3_000_000,
                "numShufflePartitions": 2,
                "numStateStoreInstances": 2,
                "customMetrics": {"stateOnCurrentVersionSizeBytes": 3_000_000 * 250},
            }
        ],
    }
    lines = [
        {"type": "started", "time": "2026-01-01T00:00:00.000Z", "run_id": "a"},
        {"type": "progress", "time": "2026-01-01T00:00:01.000Z", "run_id": "a", "progress": progress},
        {"type": "terminated", "time": "2026-01-01T00:00:02.000Z", "run_id": "a"},
    ]
    (monitor / "a.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    config = load_config(
        write_config(
            tmp_path,
            spark={"driver_memory": "1g"},
            checkpoint={"location": str(root)},
            monitor={"dir": str(monitor)},
        )
    )
    start = plan_start(config, available_bytes=8 * GB)
    assert start.state_store is StateStoreKind.HDFS and start.cap is None
    [outgrown] = start.findings
    assert outgrown.code == "HDFS_STATE_OUTGROWS_HEAP" and "3,000,000 rows at batch 40" in outgrown.message
    assert f"tidemark state repartition {root} --partitions 2 --state-store rocksdb --apply" in outgrown.fix


def test_a_large_state_gets_write_buffers_that_hold_a_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The checkpoint's files stand for 10 M keys on 2 partitions (17 B of SST a key, as the benchmark measured).
    import tidemark.sizing.store_start as store_start

    root = _copy("rocksdb_window", tmp_path)
    ten_million = {0: 85_000_000, 1: 85_000_000}
    monkeypatch.setattr(store_start, "state_need", lambda sizes, conf, keys: state_need(ten_million, conf, None))
    spark = {"driver_memory": "12g"}
    start = plan_start(load_config(write_config(tmp_path, checkpoint={"location": str(root)}, spark=spark)), 24 * GB)
    assert start.cap is not None and start.cap.write_buffer_mb > 384
    conf = start.config.spark_conf()
    assert conf[f"{_ROCKSDB}writeBufferSizeMB"] == str(start.cap.write_buffer_mb)
    assert conf[f"{_ROCKSDB}writeBufferCacheRatio"] == "0.8"
    assert start.as_record()["rocksdb"]["write_buffer_mb"] == start.cap.write_buffer_mb  # type: ignore[index]
    own = {**spark, "conf": {f"{_ROCKSDB}writeBufferSizeMB": "128"}}
    mine = plan_start(load_config(write_config(tmp_path, checkpoint={"location": str(root)}, spark=own)), 24 * GB)
    assert mine.config.spark_conf()[f"{_ROCKSDB}writeBufferSizeMB"] == "128"
