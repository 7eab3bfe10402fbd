"""Graceful stop, clear errors for bad environments, and the example project."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import kafka_source, read_sink, write_config
from tests.integration.test_recovery import _assert_matches_oracle, _expected
from tests.oracles import window_oracle
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.errors import EnvironmentProblem, SourceError
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.run import StopReason, run_pipeline

pytestmark = pytest.mark.integration


def _batches(folder: Path) -> set[int]:
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()


def _sink_log_files(sink: Path) -> set[str]:
    listed: set[str] = set()
    for entry in (sink / "_spark_metadata").iterdir():
        if entry.name.startswith("."):
            continue
        for line in entry.read_text().splitlines()[1:]:
            listed.add(Path(json.loads(line)["path"].removeprefix("file:")).name)
    return listed


def _assert_no_half_batch(root: Path) -> None:
    """Every planned batch is committed, and every Parquet file on disk is in the sink's log."""
    offsets, commits = _batches(root / "checkpoint" / "offsets"), _batches(root / "checkpoint" / "commits")
    assert offsets and max(offsets) == max(commits)
    on_disk = {p.name for p in (root / "output").rglob("*.parquet")}
    assert on_disk <= _sink_log_files(root / "output")


def test_stop_request_finishes_batch_in_flight_then_restart_completes(spark: Any, tmp_path: Path) -> None:
    data = generate_events(tmp_path / "landing", events=2400, keys=4, files=8, seed=5)
    config = load_config(write_config(tmp_path, trigger={"mode": "processing-time", "interval": "6 seconds"}))
    stop = threading.Event()

    def stop_after_two(progress: dict[str, Any]) -> None:
        if progress["numInputRows"] > 0 and progress["batchId"] >= 1:
            stop.set()

    first = run_pipeline(config, stop=stop, on_progress=stop_after_two)
    assert first.stopped is StopReason.REQUESTED
    assert not first.interrupted
    _assert_no_half_batch(tmp_path)
    committed = max(_batches(tmp_path / "checkpoint" / "commits"))
    assert committed < 8, "the run should have stopped before reading every file"

    second = run_pipeline(config, available_now=True)
    assert second.first_batch == committed + 1
    expected = window_oracle([[f] for f in data.files], timedelta(minutes=15), timedelta(minutes=10))
    actual = read_sink(tmp_path / "output")
    assert len(actual) == len(expected)
    assert not actual.duplicated(["user", "windowStart"]).any()
    assert actual["count"].sum() == expected["count"].sum()


def test_max_duration_stops_gracefully(spark: Any, tmp_path: Path) -> None:
    generate_events(tmp_path / "landing", events=300, keys=3, files=3, seed=1)
    config = load_config(write_config(tmp_path, trigger={"mode": "processing-time", "interval": "4 seconds"}))
    result = run_pipeline(config, max_duration=timedelta(seconds=8))
    assert result.stopped is StopReason.MAX_DURATION
    assert not result.interrupted
    assert result.duration >= timedelta(seconds=8)
    _assert_no_half_batch(tmp_path)


def test_missing_source_path_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = load_config(write_config(tmp_path))
    with pytest.raises(SourceError, match="does not exist"):
        run_pipeline(config)
    assert main(["run", str(tmp_path / "tidemark.toml")]) == 1
    err = capsys.readouterr().err
    assert "source.path" in err and "Traceback" not in err


def test_kafka_offline_with_an_empty_jar_cache_names_the_fetch_command(tmp_path: Path) -> None:
    # A first run with no network: the Kafka connector is neither cached nor downloadable. One line, exit 1,
    # before any JVM starts.
    config = write_config(
        tmp_path,
        source=kafka_source("127.0.0.1:9", "events"),
    )
    env = {
        **os.environ,
        "TIDEMARK_CACHE_DIR": str(tmp_path / "empty-cache"),
        "TIDEMARK_MAVEN_REPOSITORY": "http://127.0.0.1:9/",
        "HOME": str(tmp_path / "home"),  # no ~/.m2 to copy from
    }
    done = subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", "run", str(config), "--available-now"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("tidemark running")]
    assert len(lines) == 1 and "tidemark jars fetch" in lines[0] and "spark-sql-kafka-0-10" in lines[0], lines
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "checkpoint").exists()


def test_missing_java_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidemark.session import check_java

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnvironmentProblem, match="no Java runtime found"):
        check_java()


@pytest.mark.slow
def test_sigterm_stops_cli_run_gracefully_with_exit_0(tmp_path: Path) -> None:
    generate_events(tmp_path / "landing", events=4000, keys=4, files=20, seed=9)
    config = write_config(tmp_path, trigger={"mode": "processing-time", "interval": "4 seconds"})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidemark.cli.main", "run", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "checkpoint" / "commits" / "1").exists():
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "no batch committed in time"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "signal" in out
    _assert_no_half_batch(tmp_path)
    assert max(_batches(tmp_path / "checkpoint" / "commits")) < 20
    assert not (tmp_path / "checkpoint" / "_tidemark" / "run.lock").exists()


def test_init_then_run_example(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "demo"
    assert main(["init", str(target)]) == 0
    assert "tidemark run" in capsys.readouterr().out
    result = run_pipeline(load_config(target / "tidemark.toml"), available_now=True)
    assert result.stopped is StopReason.FINISHED
    assert result.quarantined > 0
    frame = read_sink(target / "output")
    assert len(frame) > 0 and frame["count"].min() >= 1


def test_run_gives_a_shared_session_its_settings_back(spark: Any, tmp_path: Path) -> None:
    generate_events(tmp_path / "landing", events=200, keys=3, files=2, seed=2)
    config = load_config(write_config(tmp_path, spark={"shuffle_partitions": 3}, checkpoint={"state_store": "hdfs"}))
    before = spark.conf.get("spark.sql.shuffle.partitions")
    provider_before = spark.conf.get("spark.sql.streaming.stateStore.providerClass", None)
    run_pipeline(config, available_now=True)
    offsets = (tmp_path / "checkpoint" / "offsets" / "0").read_text()
    assert '"spark.sql.shuffle.partitions":"3"' in offsets and "HDFSBackedStateStoreProvider" in offsets
    assert spark.conf.get("spark.sql.shuffle.partitions") == before != "3"
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass", None) == provider_before


def test_bad_schema_is_a_usage_error_naming_the_key(spark: Any, tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "landing").mkdir()
    path = write_config(tmp_path, source={"schema": "user STRING,, ts"})
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "source.schema" in err and "not a valid Spark DDL schema" in err and "Traceback" not in err


def test_a_cli_restart_plans_its_start_and_enters_its_session_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tidemark run` on a checkpoint with committed batches: the restart check reads the state and failover runs
    before the query, all on one planned start and one session (before #38's run path: planned twice, the check's
    session and the run's each set up apart). The output still equals the oracle."""
    from tidemark.needs import pipeline_session
    from tidemark.pipeline import start as start_module
    from tidemark.sizing import store_start

    data = generate_events(tmp_path / "all", events=600, keys=3, files=4, seed=13)
    files = list(data.files)
    (tmp_path / "landing").mkdir()
    for file in files[:2]:
        file.rename(tmp_path / "landing" / file.name)
    config = write_config(tmp_path, checkpoint={"on_missing": "recover"})
    assert main(["run", str(config), "--available-now"]) == 0
    for file in files[2:]:
        file.rename(tmp_path / "landing" / file.name)
    plans: list[object] = []
    sessions: list[object] = []
    real_plan, real_session = store_start.plan_start, pipeline_session

    def counted_plan(*args: Any, **kwargs: Any) -> Any:
        plans.append(args[0])
        return real_plan(*args, **kwargs)

    def counted_session(*args: Any, **kwargs: Any) -> Any:
        sessions.append(args[0])
        return real_session(*args, **kwargs)

    monkeypatch.setattr(store_start, "plan_start", counted_plan)
    monkeypatch.setattr(start_module, "pipeline_session", counted_session)
    assert main(["run", str(config), "--available-now"]) == 0
    assert len(plans) == 1 and len(sessions) == 1, (plans, sessions)
    capsys.readouterr()
    _assert_matches_oracle(spark, tmp_path / "output", _expected([tmp_path / "landing" / f.name for f in files]))
