"""Fault injection against the batch oracle: lost checkpoint, corrupt state file, driver killed mid-batch.

In every case the final sink must equal the pandas oracle, with no (key, window) missing and none
twice, for a plain Parquet reader (pyarrow) and for Spark's reader (through the sink's log).
The data has no very late events, so the oracle does not depend on how files fall into batches.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.helpers import progress_lines, read_sink, stop_before_the_no_data_batch, write_config
from tests.oracles import window_oracle
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.formats import read_recovery_marker
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.run import run_pipeline
from tidemark.recovery.audit import audit_sink
from tidemark.recovery.failover import Failover
from tidemark.storage import parse_location

pytestmark = pytest.mark.integration

KEY = ["user", "windowStart", "windowEnd"]


def _landing(tmp_path: Path, files: int, seed: int) -> list[Path]:
    """Generated files outside the landing folder, to be released into it in arrival order."""
    data = generate_events(tmp_path / "all", events=60 * files, keys=3, files=files, seed=seed, span=timedelta(hours=2))
    (tmp_path / "landing").mkdir()
    return list(data.files)


def _release(files: list[Path], landing: Path) -> None:
    for file in files:
        shutil.copy2(file, landing / file.name)
        time.sleep(0.02)  # distinct modification times keep the arrival order


def _expected(files: list[Path]) -> pd.DataFrame:
    return window_oracle([[f] for f in files], window=timedelta(minutes=15), watermark=timedelta(minutes=10))


def _assert_matches_oracle(spark: Any, sink: Path, expected: pd.DataFrame) -> None:
    actual = read_sink(sink)
    assert not actual.duplicated(KEY).any(), "pyarrow sees a (key, window) twice"
    merged = actual.merge(expected, on=KEY, how="outer", suffixes=("", "_oracle"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"][KEY]
    assert (merged["count"] == merged["count_oracle"]).all()
    assert (merged["value_sum"] - merged["value_sum_oracle"]).abs().max() < 1e-6
    frame = spark.read.parquet(str(sink))
    assert frame.count() == len(expected)
    assert frame.select("user", "windowStart").distinct().count() == len(expected)


@pytest.mark.reliability(fault="checkpoint lost + recover", storage="local", sink="parquet")
@pytest.mark.slow
def test_checkpoint_deleted_mid_stream_recovers_automatically(spark: Any, tmp_path: Path) -> None:
    files = _landing(tmp_path, files=4, seed=21)
    landing, sink = tmp_path / "landing", tmp_path / "output"
    config = load_config(
        write_config(tmp_path, source={"max_files_per_trigger": 2}, checkpoint={"on_missing": "recover"})
    )
    _release(files[:2], landing)
    run_pipeline(config, prestarts=[Failover()])
    first_run = {p: p.stat().st_mtime_ns for p in sink.rglob("*.parquet")}
    assert first_run
    shutil.rmtree(tmp_path / "checkpoint")  # the fault: checkpoint gone, sink and its log still there
    _release(files[2:], landing)

    # on_missing = "recover": archive, replay from the resume point, repair the log
    run_pipeline(config, prestarts=[Failover()])

    marker = read_recovery_marker(parse_location(str(tmp_path / "checkpoint")))
    assert marker is not None and marker.injected
    # Windows before the resume point were not touched; the ones at or after it were rewritten.
    kept = {p for p in first_run if p.exists()}
    assert kept and all(p.stat().st_mtime_ns == first_run[p] for p in kept)
    archived = list((tmp_path / ".tidemark-archive").glob("*/sink-metadata/_spark_metadata/0"))
    assert len(archived) == 1
    _assert_matches_oracle(spark, sink, _expected(files))
    audit = audit_sink(config)  # issue 16.3: exactly once after a recovery, batch by batch
    assert audit.ok, audit.violations


def test_corrupt_newest_state_file_rolls_back_to_batch(spark: Any, tmp_path: Path) -> None:
    files = _landing(tmp_path, files=3, seed=5)
    landing, sink = tmp_path / "landing", tmp_path / "output"
    config_path = write_config(tmp_path)  # one file per batch: batches 0, 1, 2 and a no-data batch 3
    _release(files, landing)
    run_pipeline(load_config(config_path), prestarts=[Failover()])
    store = tmp_path / "checkpoint" / "state" / "0" / "0"
    newest = max(
        (p for p in store.iterdir() if p.suffix in (".changelog", ".zip") and p.name[0].isdigit()),
        key=lambda p: int(p.name.split(".")[0].split("_")[0]),
    )
    newest_version = int(newest.name.split(".")[0])
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2] + b"\x00garbage")  # the fault
    to_batch = newest_version - 3  # keep batch 1: its state (version 2) is intact
    assert to_batch == 1

    assert main(["recover", str(config_path), "--to-batch", str(to_batch)]) == 0  # dry run
    assert (tmp_path / "checkpoint" / "commits" / "2").exists()
    assert main(["recover", str(config_path), "--to-batch", str(to_batch), "--apply"]) == 0
    assert not (tmp_path / "checkpoint" / "commits" / "2").exists()
    assert not newest.exists()  # the corrupt file is in the archive now
    assert list((tmp_path / ".tidemark-archive").rglob(newest.name))

    assert main(["run", str(config_path), "--available-now"]) == 0
    assert (tmp_path / "checkpoint" / "commits" / "2").exists()
    _assert_matches_oracle(spark, sink, _expected(files))


@pytest.mark.parametrize("committed", [True, False], ids=["killed-after-commit", "killed-before-commit"])
def test_a_restart_with_no_new_files_writes_the_windows_the_last_batch_closed(
    spark: Any, tmp_path: Path, committed: bool
) -> None:
    # Stopped between the last data batch and its no-data batch; the restart has no new file. Killed before the
    # commit, the re-run batch is skipped by the sink (it logged it) and Spark commits a stale watermark: the
    # watermark is computed again from the files the batch read, and an available-now query that ended owing the
    # no-data batch is started once more.
    files = _landing(tmp_path, files=3, seed=31)
    landing, sink = tmp_path / "landing", tmp_path / "output"
    config_path = write_config(tmp_path)  # one file per batch: batches 0, 1, 2 and a no-data batch 3
    _release(files, landing)
    assert main(["run", str(config_path), "--available-now"]) == 0
    no_data = stop_before_the_no_data_batch(tmp_path / "checkpoint", sink, committed)

    assert main(["run", str(config_path), "--available-now"]) == 0

    _assert_matches_oracle(spark, sink, _expected(files))
    owed = progress_lines(tmp_path / "checkpoint-monitor", "owed-batch")
    assert [(o["after"], o["batch"], o["recomputed"]) for o in owed] == [(no_data - 1, no_data, not committed)]


@pytest.mark.reliability(fault="driver kill", storage="local", sink="parquet")
@pytest.mark.slow
def test_driver_killed_during_a_batch_then_plain_restart(spark: Any, tmp_path: Path) -> None:
    files = _landing(tmp_path, files=3, seed=8)
    landing, sink = tmp_path / "landing", tmp_path / "output"
    config_path = write_config(tmp_path, trigger={"mode": "processing-time", "interval": "1 second"})
    _release(files, landing)
    commits = tmp_path / "checkpoint" / "commits"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    driver = subprocess.Popen(
        [sys.executable, "-m", "tidemark.cli.main", "run", str(config_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not (commits / "0").exists():
            assert driver.poll() is None, "the driver exited before its first commit"
            assert time.monotonic() < deadline, "no first commit in time"
            time.sleep(0.1)
        # Batch 1 is planned the moment batch 0 commits; kill while it runs.
        while not (tmp_path / "checkpoint" / "offsets" / "1").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the whole driver: Python and its JVM
        driver.wait(timeout=60)
    assert not (commits / "2").exists(), "the driver finished before it was killed"

    assert main(["run", str(config_path), "--available-now"]) == 0
    _assert_matches_oracle(spark, sink, _expected(files))
