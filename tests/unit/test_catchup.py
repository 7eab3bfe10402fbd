"""Adaptive catch-up: the batch-size arithmetic, the backlog against a source log, and the run's phases."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.config.model import StateStoreKind
from tidemark.context import PipelineContext
from tidemark.errors import ConfigError
from tidemark.pipeline.backlog import recent_progress
from tidemark.pipeline.catchup import memory_ceiling_bytes
from tidemark.pipeline.phases import RunPhase, run_phases
from tidemark.sizing.memory import MIB, MemoryConf
from tidemark.sources.catchup import Throughput, fit_throughput
from tidemark.sources.files.backlog import batch_samples, file_key, files_of_batches, read_backlog
from tidemark.sources.files.catchup import (
    LISTING_THRESHOLD_KEY,
    MAX_PARTITION_BYTES_KEY,
    FileSplit,
    Limit,
    balanced_split_bytes,
    busiest_slot,
    file_split,
    files_within,
    plan_catch_up,
    read_tasks,
)
from tidemark.sources.kafka.catchup import plan_kafka_catch_up

MB = 1024**2


def test_files_within_takes_the_most_files_that_fit_wherever_a_batch_starts() -> None:
    assert files_within([10, 10, 10, 10], 25) == 2
    assert files_within([10, 10, 10, 10], 40) == 4
    assert files_within([10, 10, 10, 10], 5) == 1  # one file over the budget still makes a batch
    # The big file must fit with its neighbours in every window: [1, 50] and [50, 1] are 51.
    assert files_within([1, 50, 1, 1, 1], 51) == 2
    assert files_within([1, 50, 1, 1, 1], 52) == 3


def _rate(mb_per_second: float, fixed_ms: float = 0.0) -> Throughput:
    return Throughput(mb_per_second * MB, fixed_ms, 5, "test")


def test_whole_backlog_in_one_batch_when_it_fits_the_target() -> None:
    plan = plan_catch_up([5 * MB] * 40, 4, timedelta(minutes=1), _rate(10), ceiling_bytes=10**12)
    assert plan.active
    assert (plan.files_per_trigger, plan.expected_batches, plan.limited_by) == (40, 1, Limit.BACKLOG)
    assert plan.expected_batch_ms == pytest.approx(20_000)


def test_target_duration_splits_into_balanced_batches() -> None:
    # 1 MB/s and 2 s of fixed cost per batch: a 32 s target leaves 30 s, i.e. 30 MB or 6 files; 40 files need
    # 7 batches, balanced to 6 files each.
    plan = plan_catch_up([5 * MB] * 40, 4, timedelta(seconds=32), _rate(1, fixed_ms=2000), ceiling_bytes=10**12)
    assert plan.active and plan.limited_by is Limit.DURATION
    assert (plan.files_per_trigger, plan.expected_batches, plan.bytes_per_trigger) == (6, 7, 30 * MB)


def test_memory_ceiling_caps_the_batch() -> None:
    plan = plan_catch_up([5 * MB] * 40, 4, timedelta(minutes=10), _rate(10), ceiling_bytes=50 * MB)
    assert plan.active and plan.limited_by is Limit.MEMORY
    assert (plan.files_per_trigger, plan.expected_batches) == (10, 4)


@pytest.mark.parametrize(
    ("sizes", "steady", "ceiling", "reason"),
    [
        ([], 4, 10**12, "no backlog"),
        ([MB] * 3, 4, 10**12, "fits one steady-state batch"),
        ([MB] * 30, None, 10**12, "in one batch"),
        ([MB] * 30, 4, 3 * MB, "memory ceiling allows no more"),
    ],
)
def test_steady_size_when_catch_up_would_not_help(
    sizes: list[int], steady: int | None, ceiling: int, reason: str
) -> None:
    plan = plan_catch_up(sizes, steady, timedelta(minutes=1), _rate(10), ceiling)
    assert not plan.active
    assert plan.files_per_trigger == steady
    assert reason in plan.reason


def test_no_limit_is_split_when_the_backlog_exceeds_the_budget() -> None:
    plan = plan_catch_up([MB] * 30, None, timedelta(seconds=10), _rate(1), ceiling_bytes=10**12)
    assert plan.active and (plan.files_per_trigger, plan.expected_batches) == (10, 3)


@pytest.mark.parametrize(
    ("sizes", "slots"),
    [
        ([int(4.35 * MB)] * 40, 2),  # the throughput benchmark's backlog: 3 tasks of 15, 15 and 10 files
        ([30 * MB] * 50, 4),
        ([MB * (1 + i % 7) for i in range(300)], 8),
        ([100 * MB] * 5, 2),
    ],
)
def test_balanced_split_evens_the_read_tasks_over_the_slots(sizes: list[int], slots: int) -> None:
    spark_default = FileSplit()
    split = balanced_split_bytes(sizes, slots, spark_default)
    assert split is not None and split <= spark_default.max_partition_bytes
    before = read_tasks(sizes, slots, spark_default)
    after = read_tasks(sizes, slots, FileSplit(split))
    assert busiest_slot(after, slots) < 0.95 * busiest_slot(before, slots)
    assert max(after) <= max(before)  # no task reads more than with Spark's own split


def test_read_tasks_cut_like_spark() -> None:
    # The throughput benchmark's backlog: Spark 4.1 made 3 read tasks (its event log: 1.6, 1.7 and 0.8 s).
    file = int(4.35 * MB)
    tasks = read_tasks([file] * 40, 2, FileSplit())
    assert [t // (file + FileSplit().open_cost_bytes) for t in tasks] == [15, 15, 10]
    assert busiest_slot(tasks, 2) == tasks[0] + tasks[2]
    # A file bigger than a split is cut into pieces.
    assert len(read_tasks([300 * MB], 2, FileSplit())) == 3


def test_balanced_split_leaves_even_splits_and_one_slot_alone() -> None:
    assert balanced_split_bytes([10 * MB] * 10, 2, FileSplit()) is None  # Spark's 2 tasks of 5 files are even
    # 3 files of 50 MB on 2 slots: Spark's split (75 MB) packs 1 file a task, 3 tasks; unsplittable stays so.
    assert balanced_split_bytes([50 * MB] * 3, 2, FileSplit(splittable=False)) is None
    assert balanced_split_bytes([50 * MB] * 3, 2, FileSplit()) is not None
    assert balanced_split_bytes([10 * MB] * 100, 1, FileSplit()) is None
    # 17 tasks of 3 files on 2 slots: no candidate beats Spark's split by 5 %.
    assert balanced_split_bytes([30 * MB] * 50, 2, FileSplit()) is None


def test_catch_up_plan_carries_the_split_to_its_query(tmp_path: Path) -> None:
    sizes = [4_350_000] * 40
    plan = plan_catch_up(sizes, 4, timedelta(minutes=10), _rate(100), 10**12, task_slots=2)
    assert plan.active and plan.split_bytes == balanced_split_bytes(sizes, 2, FileSplit())
    config = load_config(write_config(tmp_path))
    # 40 files in the batch: more than Spark lists on the driver, and the landing folder is on the local disk.
    assert RunPhase(config, True, plan).spark_conf == {
        MAX_PARTITION_BYTES_KEY: str(plan.split_bytes),
        LISTING_THRESHOLD_KEY: "40",
    }
    assert RunPhase(config, True, None).spark_conf == {}
    on_s3 = load_config(write_config(tmp_path, source={"path": "s3a://bucket/landing"}))
    assert RunPhase(on_s3, True, plan).spark_conf == {MAX_PARTITION_BYTES_KEY: str(plan.split_bytes)}
    assert plan_catch_up(sizes, 4, timedelta(minutes=10), _rate(100), 10**12, 2, split=None).split_bytes is None
    # The user's own split settings (or what Spark divides by) win: tidemark does not plan one.
    assert file_split(config) == FileSplit()
    for key in ("spark.sql.files.openCostInBytes", "spark.sql.files.minPartitionNum", "spark.default.parallelism"):
        path = write_config(tmp_path)
        path.write_text(path.read_text() + f'\n[spark.conf]\n"{key}" = "8"\n')
        assert file_split(load_config(path)) is None, key
    # Parquet's work follows row groups; multiLine JSON and gzip files are one task each.
    assert file_split(load_config(write_config(tmp_path, source={"format": "parquet"}))) is None
    assert file_split(config, ["/l/a.json", "/l/b.json.gz"]) == FileSplit(splittable=False)
    multi_line = load_config(write_config(tmp_path, source={"options": {"multiLine": "true"}}))
    assert file_split(multi_line) == FileSplit(splittable=False)


def test_fit_separates_fixed_cost_from_rate() -> None:
    samples = [(b * MB, 500 + 1000 * b / 4) for b in (2, 4, 8, 16)]  # 500 ms + 4 MB/s
    fitted = fit_throughput(samples)
    assert fitted is not None
    assert fitted.fixed_ms == pytest.approx(500)
    assert fitted.bytes_per_second == pytest.approx(4 * MB)
    same_size = fit_throughput([(4 * MB, 1500.0)] * 3)
    assert same_size is not None and same_size.fixed_ms == 0
    assert same_size.bytes_per_second == pytest.approx(4 * MB / 1.5)
    assert fit_throughput([]) is None


def test_memory_ceiling_follows_the_planner() -> None:
    hdfs = MemoryConf(executor_memory_bytes=1024 * MIB, state_store=StateStoreKind.HDFS)
    rocksdb = MemoryConf(executor_memory_bytes=1024 * MIB, state_store=StateStoreKind.ROCKSDB)
    unified = (1024 - 300) * MIB * 0.6  # execution may borrow all of it without a cache
    assert memory_ceiling_bytes(rocksdb, 100 * MB, 1.0) == int(0.8 * unified)
    # HDFS-backed state sits on the heap: it comes off the headroom; Parquet grows 3x when read.
    assert memory_ceiling_bytes(hdfs, 100 * MB, 1.0) == int(0.8 * unified - 100 * MB)
    assert memory_ceiling_bytes(hdfs, 100 * MB, 3.0) == int((0.8 * unified - 100 * MB) / 3)
    assert memory_ceiling_bytes(hdfs, 10**10, 1.0) == 0


def _landing(tmp_path: Path, files: int, size: int = 1000) -> list[Path]:
    landing = tmp_path / "landing"
    landing.mkdir()
    paths = []
    for i in range(files):
        path = landing / f"events-{i}.json"
        path.write_text("x" * (size - 1) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
        paths.append(path)
    (landing / "_temporary").mkdir()
    (landing / "_temporary" / "half-written.json").write_text("{}\n")
    (landing / ".events-0.json.crc").write_text("crc")
    return paths


def _source_log(tmp_path: Path, batches: list[list[Path]], log_offsets: list[int] | None = None) -> None:
    """Source log entries 0..n-1; query batch i recorded logOffset log_offsets[i] (default: i) in its offsets."""
    checkpoint = tmp_path / "checkpoint"
    folder = checkpoint / "sources" / "0"
    folder.mkdir(parents=True)
    (checkpoint / "offsets").mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": "q-1"}) + "\n")
    for entry, paths in enumerate(batches):
        lines = ["v1"] + [json.dumps({"path": p.as_uri(), "timestamp": 0, "batchId": entry}) for p in paths]
        (folder / str(entry)).write_text("\n".join(lines) + "\n")
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})
    for batch, offset in enumerate(log_offsets if log_offsets is not None else range(len(batches))):
        (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{json.dumps({'logOffset': offset})}\n")


def test_backlog_is_the_landing_folder_minus_the_source_log(tmp_path: Path) -> None:
    paths = _landing(tmp_path, 6)
    _source_log(tmp_path, [paths[0:2], paths[2:3]])
    config = load_config(write_config(tmp_path))
    backlog = read_backlog(config)
    assert [f.key for f in backlog.pending] == [file_key(str(p)) for p in paths[3:]]  # oldest first, no hidden files
    assert backlog.pending_bytes == 3000 and backlog.query_id == "q-1"


def _progress_line(batch: int, duration: int, rows: int = 10, query: str = "q-1") -> str:
    progress = {"id": query, "runId": "r", "batchId": batch, "batchDuration": duration, "numInputRows": rows}
    return json.dumps({"type": "progress", "time": "2026-01-01T00:00:00Z", "run_id": "run", "progress": progress})


def test_throughput_samples_come_from_the_progress_log_and_the_source_log(tmp_path: Path) -> None:
    paths = _landing(tmp_path, 6)
    # Query batch 1 was a no-data batch (same logOffset as batch 0): batch 2 read source entry 1.
    _source_log(tmp_path, [paths[0:2], paths[2:3]], log_offsets=[0, 0, 1])
    monitor = tmp_path / "checkpoint-monitor"
    monitor.mkdir()
    older = [_progress_line(0, 900), _progress_line(5, 100, query="another-checkpoint")]
    (monitor / "20260101T000000Z-aaaaaa.jsonl").write_text("\n".join(older) + "\n")
    newer = [_progress_line(1, 50, rows=0), _progress_line(2, 400)]
    (monitor / "20260102T000000Z-bbbbbb.jsonl").write_text("\n".join(newer) + "\n")
    config = load_config(write_config(tmp_path))
    backlog = read_backlog(config)
    history = recent_progress(config.monitor_dir, backlog.query_id)
    assert [p.batch_id for p in history] == [0, 2]  # oldest first, without batches of no input or other queries
    files = files_of_batches(config.checkpoint.location, [p.batch_id for p in history])
    assert files[2] == (file_key(str(paths[2])),)
    assert batch_samples(history, files, backlog.sizes_by_key) == [(2000, 900.0), (1000, 400.0)]
    assert [p.batch_id for p in recent_progress(config.monitor_dir, backlog.query_id, limit=1)] == [2]


def test_available_now_run_is_one_query_at_the_catch_up_size(tmp_path: Path) -> None:
    _landing(tmp_path, 12)
    config = load_config(write_config(tmp_path, trigger={"target_batch_duration": "1 minute"}))
    plans = []
    phases = list(run_phases(PipelineContext.of(config), True, plans.append))
    assert len(phases) == 1 and phases[0].available_now
    assert phases[0].config.source.max_files_per_trigger == 12  # 12 KB: one batch
    assert config.source.max_files_per_trigger == 1
    assert plans[0].active and plans[0].throughput_origin.startswith("default estimate (2 task slots")


def test_processing_time_run_catches_up_then_starts_the_steady_query(tmp_path: Path) -> None:
    _landing(tmp_path, 12)
    trigger = {"mode": "processing-time", "interval": "5 seconds", "target_batch_duration": "1 minute"}
    config = load_config(write_config(tmp_path, trigger=trigger))
    phases = run_phases(PipelineContext.of(config), False)
    catch_up = next(phases)
    assert catch_up.available_now and catch_up.config.source.max_files_per_trigger == 12
    # Nothing read the files (no Spark here): the next plan sees the same backlog and does not try again.
    steady = next(phases)
    assert not steady.available_now and steady.config.source.max_files_per_trigger == 1
    assert next(phases, None) is None


def test_catch_up_off_without_a_target(tmp_path: Path) -> None:
    _landing(tmp_path, 12)
    config = load_config(write_config(tmp_path))
    phases = list(run_phases(PipelineContext.of(config), True))
    assert len(phases) == 1 and phases[0].config is config and phases[0].plan is None


def test_target_batch_duration_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="target_batch_duration"):
        load_config(write_config(tmp_path, trigger={"target_batch_duration": "0 s"}))


def _records(per_second: float, fixed_ms: float = 0.0) -> Throughput:
    return Throughput(per_second, fixed_ms, 5, "test")


def test_kafka_catch_up_sizes_max_offsets_per_trigger_from_backlog_and_throughput() -> None:
    # 1 M records at 20,000/s with 2 s per batch fixed: a 30 s target reads 560,000 -> 2 batches of 500,000.
    plan = plan_kafka_catch_up(1_000_000, 10_000, timedelta(seconds=30), _records(20_000, 2_000))
    assert plan.active and (plan.offsets_per_trigger, plan.expected_batches) == (500_000, 2)
    assert plan.expected_batch_ms == pytest.approx(2_000 + 25_000)
    # The whole backlog fits the target: one batch.
    one = plan_kafka_catch_up(300_000, 10_000, timedelta(seconds=30), _records(20_000))
    assert (one.offsets_per_trigger, one.expected_batches) == (300_000, 1)


@pytest.mark.parametrize(
    ("backlog", "steady", "why"),
    [
        (0, 100, "no backlog"),
        (5_000, None, "without max_offsets_per_trigger"),
        (90, 100, "fits one steady-state batch"),
        (10**9, 10**6, "allows no more than the steady-state"),
    ],
)
def test_kafka_catch_up_stays_off(backlog: int, steady: int | None, why: str) -> None:
    plan = plan_kafka_catch_up(backlog, steady, timedelta(seconds=30), _records(20_000))
    assert not plan.active and why in plan.reason
    assert plan.offsets_per_trigger == steady
