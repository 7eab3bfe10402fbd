"""Adaptive catch-up end to end: bigger batches over the backlog, the same rows as the oracle of those batches."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import read_sink, write_config
from tests.oracles import assert_matches_oracle, window_oracle
from tidemark.config import load_config
from tidemark.formats import Checkpoint
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.run import StopReason, run_pipeline
from tidemark.session import runtime_conf

pytestmark = pytest.mark.integration


def _batches_read(checkpoint: Path) -> list[list[Path]]:
    """The files of every batch that read any, from the checkpoint's source log, in batch order."""
    by_batch = Checkpoint.open(str(checkpoint)).source_files_by_batch()
    return [[Path(p.removeprefix("file://")) for p in by_batch[b]] for b in sorted(by_batch)]


def _catch_up_lines(monitor_dir: Path) -> list[dict[str, Any]]:
    lines = [json.loads(ln) for f in monitor_dir.glob("*.jsonl") for ln in f.read_text().splitlines() if ln]
    return [ln for ln in lines if ln["type"] == "catch-up"]


def test_available_now_backlog_in_one_batch_equals_the_oracle(spark: Any, tmp_path: Path) -> None:
    data = generate_events(tmp_path / "landing", events=2000, keys=7, files=6, seed=5, late_fraction=0.03)
    config = load_config(write_config(tmp_path, trigger={"target_batch_duration": "2 minutes"}))
    result = run_pipeline(config)

    assert result.stopped is StopReason.FINISHED
    batches = _batches_read(tmp_path / "checkpoint")
    assert [len(b) for b in batches] == [6]  # max_files_per_trigger = 1 would have made 6 batches
    expected = window_oracle(batches, window=timedelta(minutes=15), watermark=timedelta(minutes=10))
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    # In one batch the watermark does not move until the batch ends: the very late events are kept.
    one_per_batch = window_oracle([[f] for f in data.files], timedelta(minutes=15), timedelta(minutes=10))
    assert expected["count"].sum() > one_per_batch["count"].sum()
    assert result.input_rows == 2000
    (plan,) = _catch_up_lines(tmp_path / "checkpoint-monitor")
    assert plan["active"] and plan["files_per_trigger"] == 6 and plan["steady_files_per_trigger"] == 1


def test_processing_time_run_catches_up_then_reads_at_the_steady_size(spark: Any, tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    data = generate_events(staging, events=2400, keys=5, files=8, seed=9)
    landing = tmp_path / "landing"
    landing.mkdir()
    for file in data.files[:6]:
        file.rename(landing / file.name)
    trigger = {"mode": "processing-time", "interval": "1 second", "target_batch_duration": "2 minutes"}
    config = load_config(write_config(tmp_path, trigger=trigger))
    stop = threading.Event()
    failures: list[str] = []

    def feed_the_steady_query() -> None:
        """Once the steady query runs (a second query run), drop two more files, then stop when both are read."""
        deadline = time.monotonic() + 180
        first_run: str | None = None
        while time.monotonic() < deadline and not stop.is_set():
            runs = [str(q.runId) for q in spark.streams.active if q.name == "t"]
            if runs and first_run is None:
                first_run = runs[0]
            if runs and first_run is not None and runs[0] != first_run:
                for file in data.files[6:]:
                    moved = landing / file.name
                    file.rename(moved)
                    os.utime(moved)  # newer than the backlog
                break
            time.sleep(0.05)
        while time.monotonic() < deadline and not stop.is_set():
            if sum(len(b) for b in _batches_read(tmp_path / "checkpoint")) == 8:
                stop.set()
                return
            time.sleep(0.1)
        failures.append("the steady query did not read the two new files")
        stop.set()

    feeder = threading.Thread(target=feed_the_steady_query, daemon=True)
    feeder.start()
    result = run_pipeline(config, stop=stop)
    feeder.join(timeout=30)

    assert not failures
    assert result.stopped is StopReason.REQUESTED
    batches = _batches_read(tmp_path / "checkpoint")
    assert [len(b) for b in batches] == [6, 1, 1]
    expected = window_oracle(batches, window=timedelta(minutes=15), watermark=timedelta(minutes=10))
    actual = read_sink(tmp_path / "output")
    # A processing-time run writes a window once the watermark passes it: the newest windows wait for more data.
    assert len(expected) > 10
    assert_matches_oracle(actual, expected[expected["windowEnd"] <= actual["windowEnd"].max()])
    plans = _catch_up_lines(tmp_path / "checkpoint-monitor")
    assert [p["active"] for p in plans] == [True, False]


def _scan_task_costs(frame: Any, open_cost: int) -> list[int]:
    """What each read task of a DataFrame's file scan costs as Spark planned it (bytes plus open costs)."""
    scan = frame._jdf.queryExecution().executedPlan().collectLeaves().head()
    partitions = scan.inputRDD().partitions()
    return [sum(f.length() + open_cost for f in p.files()) for p in partitions]


@pytest.mark.parametrize(
    ("shape", "sizes"),
    [
        ("even", [int(4.35 * 1024**2)] * 40),
        ("mixed", [1024**2 * (1 + i % 7) for i in range(60)]),
        ("big files", [300 * 1024**2, 90 * 1024**2, 7 * 1024**2, 160 * 1024**2]),
        ("few", [50 * 1024**2] * 3),
    ],
)
def test_read_tasks_model_matches_sparks_split(spark: Any, tmp_path: Path, shape: str, sizes: list[int]) -> None:
    from tidemark.sources.files.catchup import FileSplit, balanced_split_bytes, read_tasks

    for suffix, splittable in ((".json", True), (".json.gz", False)):
        folder = tmp_path / suffix.strip(".")
        folder.mkdir()
        for i, size in enumerate(sizes):  # sparse files: Spark plans from the sizes without reading
            with (folder / f"f{i:03d}{suffix}").open("wb") as handle:
                handle.truncate(size)
        spark_own = FileSplit(splittable=splittable)
        split = balanced_split_bytes(sizes, 2, spark_own) or spark_own.max_partition_bytes
        for max_bytes in (spark_own.max_partition_bytes, split):
            spark.conf.set("spark.sql.files.maxPartitionBytes", str(max_bytes))
            try:
                tasks = _scan_task_costs(spark.read.schema("a STRING").json(str(folder)), spark_own.open_cost_bytes)
            finally:
                spark.conf.unset("spark.sql.files.maxPartitionBytes")
            model = read_tasks(sizes, 2, FileSplit(max_bytes, spark_own.open_cost_bytes, splittable))
            assert tasks == model, (shape, suffix, max_bytes)


def test_catch_up_query_reads_with_the_balanced_split(spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    from tidemark.pipeline import run
    from tidemark.sources.files import catchup
    from tidemark.sources.files.catchup import FileSplit, read_tasks

    data = generate_events(tmp_path / "landing", events=2000, keys=7, files=6, seed=5, late_fraction=0.03)
    sizes = [f.stat().st_size for f in data.files]
    # Spark's split scaled down to the test's kilobytes (the model's and the session's alike): 3 read tasks
    # of 2 files on 2 slots, the last wave half empty.
    scaled = FileSplit(max_partition_bytes=70_000, open_cost_bytes=500)
    assert len(read_tasks(sizes, 2, scaled)) == 3
    monkeypatch.setattr(catchup, "file_split", lambda config, files=(): scaled)
    queries: list[Any] = []
    start_query = run.start_query

    def recording(session: Any, *args: Any) -> Any:
        queries.append(start_query(session, *args))
        return queries[-1]

    monkeypatch.setattr(run, "start_query", recording)
    before = spark.conf.get(catchup.MAX_PARTITION_BYTES_KEY, None)
    with runtime_conf(spark, {catchup.OPEN_COST_KEY: "500"}):
        run_pipeline(load_config(write_config(tmp_path, trigger={"target_batch_duration": "2 minutes"})))

    (plan,) = _catch_up_lines(tmp_path / "checkpoint-monitor")
    assert plan["active"] and plan["split_bytes"] is not None
    # What Spark ran: the data batch's scan stage had the model's tasks for the chosen split, not Spark's 3.
    chosen = read_tasks(sizes, 2, FileSplit(plan["split_bytes"], 500))
    assert len(chosen) > 3
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(str(queries[0].runId))]
    stage_tasks = {tracker.getStageInfo(s).numTasks for job in jobs if job for s in job.stageIds}
    assert len(chosen) in stage_tasks and 3 not in stage_tasks
    assert spark.conf.get(catchup.MAX_PARTITION_BYTES_KEY, None) == before  # put back after the phase
    expected = window_oracle(_batches_read(tmp_path / "checkpoint"), timedelta(minutes=15), timedelta(minutes=10))
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    assert len(expected) > 20 and len(_batches_read(tmp_path / "checkpoint")) == 1
