"""The pipeline on a real standalone cluster (master + 2 workers on loopback), with and without a lost worker.

Each test runs `tidemark run` in a subprocess, which is the driver (client mode) of an application on the
cluster this module starts once. The output is compared with the pandas oracle computed from the landing files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pyspark
import pytest

import tidemark.cli.main
from tests.helpers import read_sink, write_config
from tests.kafka_broker import KafkaBroker
from tests.kafka_data import final_windows_oracle, make_events, malformed_positions, produce
from tests.oracles import assert_matches_oracle, window_oracle
from tidemark.cache import cache_root
from tidemark.cluster import ClusterStatus, cluster_down, cluster_status, cluster_up, kill_worker, master_json
from tidemark.cluster.model import ClusterRecord
from tidemark.cluster.processes import is_ours
from tidemark.pipeline.generate import generate_events

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TIDEMARK = str(Path(sys.executable).with_name("tidemark"))
# Generous: a loaded 2-core machine needs minutes per run; pytest's own --timeout is 600s per test.
RUN_TIMEOUT = 540


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterStatus]:
    """One master and two 1-core workers for the whole module, stopped by pid afterwards."""
    run_dir = tmp_path_factory.mktemp("cluster")
    status = cluster_up(run_dir, workers=2, cores=1, memory="1g", timeout=180)
    try:
        yield status
    finally:
        cluster_down(run_dir)


def _cluster_config(
    directory: Path, status: ClusterStatus, name: str = "cluster", source: dict[str, object] | None = None
) -> Path:
    path = write_config(
        directory,
        pipeline={"name": name},
        spark={"master": status.master_url, "shuffle_partitions": 2},
        source=source or {},
    )
    conf = {k: v for k, v in status.spark_conf.items() if k != "spark.master"}
    conf["spark.executor.memory"] = "512m"
    conf["spark.executor.cores"] = "1"
    # Spark setting names contain dots, so they are quoted TOML keys.
    table = "\n".join(f'"{k}" = "{v}"' for k, v in conf.items())
    path.write_text(path.read_text() + f"\n[spark.conf]\n{table}\n", encoding="utf-8")
    return path


def _start_run(config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "TZ": "UTC"}
    with log.open("wb") as handle:
        return subprocess.Popen(
            [TIDEMARK, "run", str(config), "--available-now"], stdout=handle, stderr=subprocess.STDOUT, env=env
        )


def _spark_log(process: subprocess.Popen[bytes]) -> str:
    """What Spark logged in a tidemark CLI process (its JVM's stderr, in tidemark's cache: docs/cli.md)."""
    found = sorted((cache_root() / "logs").glob(f"spark-*-{process.pid}.log"))
    assert found, f"no Spark log of process {process.pid} in {cache_root() / 'logs'}"
    return found[-1].read_text(errors="replace")


def _wait(process: subprocess.Popen[bytes], log: Path, deadline: float | None = None) -> None:
    timeout = RUN_TIMEOUT if deadline is None else max(1.0, deadline - time.monotonic())
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"tidemark run did not finish in {timeout:.0f}s: {log.read_text()[-3000:]}")
    assert code == 0, log.read_text()[-3000:]


def _commits(checkpoint: Path) -> list[int]:
    folder = checkpoint / "commits"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def _oracle(files: list[Path]) -> pd.DataFrame:
    return window_oracle([[f] for f in files], window=timedelta(minutes=15), watermark=timedelta(minutes=10))


def test_cluster_up_reports_two_alive_loopback_workers(cluster: ClusterStatus) -> None:
    assert cluster.master_url.startswith("spark://127.0.0.1:")
    assert cluster.alive_workers == 2
    assert [w.master_state for w in cluster.workers] == ["ALIVE", "ALIVE"]
    assert all(w.process_alive and w.cores == 1 for w in cluster.workers)
    # The CLI reports the same cluster as JSON.
    shown = subprocess.run(
        [TIDEMARK, "cluster", "status", "--run-dir", cluster.run_dir, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(shown.stdout)
    assert data["master_url"] == cluster.master_url
    assert data["alive_workers"] == 2
    assert data["spark_conf"]["spark.master"] == cluster.master_url


def test_pipeline_on_cluster_equals_oracle(cluster: ClusterStatus, tmp_path: Path) -> None:
    data = generate_events(tmp_path / "landing", events=1000, keys=5, files=2, seed=21, late_fraction=0.03)
    config = _cluster_config(tmp_path, cluster)
    log = tmp_path / "run.log"
    _wait(_start_run(config, log), log)

    expected = _oracle(data.files)
    assert len(expected) > 10
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    # The run really was an application of this cluster, with executors on both workers.
    view = master_json(cluster.webui_url)
    assert view is not None
    apps = [app for app in view["completedapps"] if app["name"] == "tidemark-cluster"]
    assert len(apps) == 1
    executor_logs = list(Path(cluster.run_dir).glob(f"work-*/{apps[0]['id']}/*/stderr"))
    assert {p.parts[-4] for p in executor_logs} == {"work-1", "work-2"}


def test_spark_submit_runs_the_cli_as_the_application(cluster: ClusterStatus, tmp_path: Path) -> None:
    # docs/cluster.md, client mode: spark-submit starts tidemark's CLI module file as the Python application.
    data = generate_events(tmp_path / "landing", events=800, keys=4, files=2, seed=8, late_fraction=0.03)
    config = _cluster_config(tmp_path, cluster, name="submitted")
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "TZ": "UTC", "PYSPARK_PYTHON": sys.executable}
    command = [str(submit), "--master", cluster.master_url, tidemark.cli.main.__file__, "run", str(config)]
    log = tmp_path / "submit.log"
    with log.open("wb") as handle:
        process = subprocess.Popen([*command, "--available-now"], stdout=handle, stderr=subprocess.STDOUT, env=env)
    _wait(process, log)

    assert_matches_oracle(read_sink(tmp_path / "output"), _oracle(data.files))
    view = master_json(cluster.webui_url)
    assert view is not None
    assert [app["name"] for app in view["completedapps"]].count("tidemark-submitted") == 1


def test_losing_a_worker_mid_stream_loses_nothing(cluster: ClusterStatus, tmp_path: Path) -> None:
    files = 4
    data = generate_events(tmp_path / "landing", events=1600, keys=5, files=files, seed=5, late_fraction=0.03)
    config = _cluster_config(tmp_path, cluster)
    log = tmp_path / "run.log"
    process = _start_run(config, log)
    checkpoint = tmp_path / "checkpoint"

    deadline = time.monotonic() + RUN_TIMEOUT
    while not _commits(checkpoint) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    committed_before_kill = len(_commits(checkpoint))
    assert process.poll() is None, f"the run ended before a worker could be killed: {log.read_text()[-2000:]}"
    assert 1 <= committed_before_kill < files, "the worker must die in the middle of the stream"
    # Worker 1 and the executor it forked die at once, as on a lost machine.
    killed = kill_worker(cluster.run_dir, 1)
    assert not killed.process_alive

    _wait(process, log, deadline)
    assert len(_commits(checkpoint)) > committed_before_kill
    # The driver saw its executor on worker 1 go away while batches were still to run (Spark's own log: the CLI
    # keeps it in a file of its own, named after the process).
    assert "Lost executor" in _spark_log(process)
    assert_matches_oracle(read_sink(tmp_path / "output"), _oracle(data.files))
    status = cluster_status(cluster.run_dir)
    assert status.alive_workers == 1
    assert [w.process_alive for w in status.workers] == [False, True]


def test_kafka_pipeline_on_cluster_ships_the_connector_jars_to_the_executors(
    cluster: ClusterStatus, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = "cluster-clicks"
    kafka_broker.create_topic(topic, partitions=4)
    produced = produce(kafka_broker, topic, make_events(300, seed=51, malformed_fraction=0.03))
    source = {
        "format": "kafka",
        "path": None,
        "max_files_per_trigger": None,
        "bootstrap_servers": kafka_broker.bootstrap,
        "topic": topic,
        "max_offsets_per_trigger": 150,
    }
    config = _cluster_config(tmp_path, cluster, name="kafka-cluster", source=source)
    log = tmp_path / "run.log"
    _wait(_start_run(config, log), log)

    assert_matches_oracle(read_sink(tmp_path / "output"), final_windows_oracle(produced))
    quarantined = [
        json.loads(line)["source"]
        for f in (tmp_path / "quarantine").glob("batch-*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert sorted(quarantined) == sorted(malformed_positions(produced, topic))
    # The executors read Kafka with the connector tidemark put on spark.jars: each fetched it into its work dir.
    view = master_json(cluster.webui_url)
    assert view is not None
    (app,) = [app for app in view["completedapps"] if app["name"] == "tidemark-kafka-cluster"]
    for jar in ("spark-sql-kafka-0-10_*.jar", "kafka-clients-*.jar"):
        fetched = list(Path(cluster.run_dir).glob(f"work-*/{app['id']}/*/{jar}"))
        assert fetched, f"no executor fetched {jar}"


def test_down_stops_every_daemon_it_started(cluster: ClusterStatus) -> None:
    record = ClusterRecord.load(Path(cluster.run_dir))
    assert record is not None
    result = cluster_down(cluster.run_dir)
    assert set(result.stopped) | set(result.forced) | set(result.already_gone) == {p.name for p in record.processes}
    assert not any(is_ours(p) for p in record.processes)
    assert not cluster_status(cluster.run_dir).master_reachable
