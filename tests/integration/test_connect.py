"""The pipeline over Spark Connect: `tidemark run` as a client of a real Connect server (tests/connect_server.py).

Each run is a fresh client process with SPARK_REMOTE set, as a Databricks or Spark Connect user runs it: no JVM in
the client; the query, its foreachBatch functions and the state run on the server. Outputs are compared with the
pandas oracle (files into Parquet, read by pyarrow) and with delta-rs (files into Delta).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable

from tests.connect_server import ClientOnly, ConnectServer, client_only, connect_server
from tests.helpers import progress_lines, read_sink, write_config
from tests.integration.test_delta_sink import _assert_exact
from tests.integration.test_recovery import _expected
from tests.kafka_broker import KafkaBroker
from tests.kafka_data import final_windows_oracle, make_events, produce
from tests.oracles import assert_matches_oracle
from tests.prometheus_stack import pushgateway_samples, start_pushgateway
from tidemark.pipeline.generate import generate_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["client_only", "connect_server"]  # the module's fixtures
KEY = ["user", "windowStart"]


def _env(server: ConnectServer, endpoint: str | None = None) -> dict[str, str]:
    return {**os.environ, "SPARK_REMOTE": endpoint or server.url, "PYSPARK_PYTHON": sys.executable}


def _tidemark(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tidemark.cli.main", *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


def _land(files: list[Path], landing: Path) -> None:
    landing.mkdir(exist_ok=True)
    for file in files:
        shutil.copy2(file, landing / file.name)


def test_files_into_parquet_over_connect_equal_the_oracle_with_progress(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    files = list(generate_events(tmp_path / "all", events=400, keys=4, files=4, seed=31).files)
    _land(files, tmp_path / "landing")
    pushgateway = start_pushgateway(tmp_path / "pushgateway")  # a real one: the run's metrics go there at its end
    config = write_config(
        tmp_path,
        pipeline={"name": "overconnect"},
        source={"max_files_per_trigger": 2},
        monitor={"pushgateway": pushgateway.url},
    )
    # A parameter after the endpoint (a user id here; a token the same way) is never shown.
    try:
        done = _tidemark(["run", str(config)], _env(connect_server, f"{connect_server.url}/;user_id=tester-7"))
        pushed = {
            name: value
            for (name, labels), value in pushgateway_samples(pushgateway.url).items()
            if ("pipeline", "overconnect") in labels
        }
    finally:
        pushgateway.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    first = done.stderr.splitlines()[0]
    assert f"on Spark Connect {connect_server.url}" in first, first
    assert "tester-7" not in done.stderr + done.stdout
    actual = read_sink(tmp_path / "output")
    expected = _expected(files)
    assert not actual.duplicated(KEY).any()
    merged = actual.merge(expected, on=KEY, how="outer", suffixes=("", "_oracle"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"][KEY]
    assert (merged["count"] == merged["count_oracle"]).all()
    assert (merged["value_sum"] - merged["value_sum_oracle"]).abs().max() < 1e-6
    # The monitor heard every batch through Connect's listener: one progress line per committed batch.
    committed = sorted(int(p.name) for p in (tmp_path / "checkpoint" / "commits").glob("[0-9]*"))
    progress = progress_lines(tmp_path / "checkpoint-monitor", "progress")
    heard = sorted(line["progress"]["batchId"] for line in progress)
    assert heard == committed and len(committed) >= 2, (heard, committed)
    # Prometheus' counters, from the same events: every batch and every input row.
    assert pushed["tidemark_batches_total"] == len(committed), pushed
    assert pushed["tidemark_input_rows_total"] == sum(line["progress"]["numInputRows"] for line in progress) > 0


def _wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout:.0f} s")


def test_files_into_delta_over_connect_exact_through_a_killed_client(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    files = list(generate_events(tmp_path / "all", events=600, keys=4, files=6, seed=32).files)
    _land(files[:4], tmp_path / "landing")
    logged_before = connect_server.log.stat().st_size  # the server (and its log) serve the module's other tests too
    config = write_config(
        tmp_path,
        source={"max_files_per_trigger": 1},
        sink={"format": "delta", "path": "output"},
        trigger={"mode": "processing-time", "interval": "1 second"},
    )
    commits = tmp_path / "checkpoint" / "commits"
    client = subprocess.Popen(
        [sys.executable, "-m", "tidemark.cli.main", "run", str(config)],
        env=_env(connect_server),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: (commits / "1").exists(), 180, "batch 1 was not committed")
    finally:
        os.killpg(client.pid, signal.SIGKILL)  # the client only: the server and its query go on
        client.wait(30)
    _land(files[4:], tmp_path / "landing")
    done = _tidemark(["run", str(config), "--available-now"], _env(connect_server))
    assert done.returncode == 0, done.stderr[-3000:]
    # The killed client's query was still running on the server, and the new run ended it, in one of two ways: its
    # start made Spark stop it, or (when the old query reached its next batch while the new run planned the batch
    # the checkpoint owed, pipeline/owed_batch.py) the old query lost that batch to the new run on Spark's own log
    # guard and stopped before writing anything. Either way one query wrote each batch: the output is exact.
    with connect_server.log.open("rb") as log:
        log.seek(logged_before)
        server_log = log.read().decode(errors="replace")
    stopped = "as a new run is being started" in server_log
    # Spark's log guard has two words: the batch's file was there first (CONCURRENT_STREAM_LOG_UPDATE), or the new
    # run's rename won while the old query wrote it (logged as "Multiple streaming queries are concurrently using"
    # with the log's path and no error class, so the path is what ties that line to this test).
    lost_the_log = "CONCURRENT_STREAM_LOG_UPDATE" in server_log or (
        f"Multiple streaming queries are concurrently using file:{tmp_path / 'checkpoint'}/" in server_log
    )
    assert stopped or lost_the_log, "the killed client's query was neither stopped nor ended by the new run"
    _assert_exact(tmp_path / "output", _expected(files))


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return lines[-1]


def test_what_needs_a_local_jvm_refuses_in_one_line_over_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    files = list(generate_events(tmp_path / "all", events=200, keys=2, files=2, seed=33).files)
    _land(files, tmp_path / "landing")
    config = write_config(tmp_path)
    assert _tidemark(["run", str(config)], _env(connect_server)).returncode == 0
    # The rehearsal copies the checkpoint on this machine, out of a server's reach: refused, exit 2.
    rehearse = _tidemark(["check", str(config), "--rehearse"], _env(connect_server))
    assert rehearse.returncode == 2, rehearse.stderr[-3000:]
    assert "not available over Spark Connect" in _one_line(rehearse)
    # Spark's state reader reads a private copy made here: a local Spark starts for it, saying why.
    shown = _tidemark(["state", "show", str(tmp_path / "checkpoint"), "--json"], _env(connect_server))
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert f"Spark Connect ({connect_server.url}) not used" in shown.stderr


def test_a_client_only_install_runs_the_pipeline_and_the_tools_without_java_or_py4j(
    connect_server: ConnectServer, client_only: ClientOnly, tmp_path: Path
) -> None:
    """pyspark-client and no Java: the pipeline over Connect, then inspect, prune and audit, all exact."""
    probe = subprocess.run(
        [
            str(client_only.python),
            "-c",
            "import importlib.util as u, shutil; print(u.find_spec('py4j'), shutil.which('java'))",
        ],
        env=client_only.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == ["None", "None"], probe.stdout  # no py4j importable, no java on PATH
    files = list(generate_events(tmp_path / "all", events=300, keys=3, files=3, seed=34).files)
    _land(files, tmp_path / "landing")
    config = write_config(tmp_path, source={"max_files_per_trigger": 2})

    def client(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [str(client_only.python), "-m", "tidemark.cli.main", *argv]
        env = client_only.env(SPARK_REMOTE=connect_server.url)
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)

    done = client("run", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    expected = _expected(files)
    actual = read_sink(tmp_path / "output")
    merged = actual.merge(expected, on=KEY, how="outer", suffixes=("", "_oracle"), indicator=True)
    assert (merged["_merge"] == "both").all() and not actual.duplicated(KEY).any()
    assert (merged["count"] == merged["count_oracle"]).all()
    checkpoint = tmp_path / "checkpoint"
    committed = sorted(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*"))
    inspected = client("checkpoint", "inspect", str(checkpoint), "--json")
    assert inspected.returncode == 0, inspected.stderr[-3000:]
    report = json.loads(inspected.stdout)
    assert report["latest_committed_batch"] == committed[-1], report
    pruned = client("checkpoint", "prune", str(checkpoint), "--keep", "1")
    assert pruned.returncode == 0 and "dry run" in pruned.stdout, pruned.stderr[-3000:]
    assert sorted(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")) == committed  # a dry run
    audited = client("audit", str(config), "--json")
    assert audited.returncode == 0, audited.stderr[-3000:]
    ledger = json.loads(audited.stdout)
    assert ledger["violations"] == [] and ledger["rows_on_storage"] == len(expected), ledger
    assert [b["batch"] for b in ledger["batches"]] == committed, ledger["batches"]


def test_recover_over_connect_after_a_lost_checkpoint_is_exact_into_delta(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    """The checkpoint is deleted; more files land; `recover --apply` over Connect resumes after the newest window the
    Delta table holds (read through delta-rs here, replayed on the server): every (key, window) once."""
    files = list(generate_events(tmp_path / "all", events=400, keys=3, files=4, seed=35).files)
    _land(files[:2], tmp_path / "landing")
    config = write_config(tmp_path, source={"max_files_per_trigger": 1}, sink={"format": "delta", "path": "output"})
    first = _tidemark(["run", str(config)], _env(connect_server))
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.rmtree(tmp_path / "checkpoint")
    _land(files[2:], tmp_path / "landing")
    recovered = _tidemark(["recover", str(config), "--apply"], _env(connect_server))
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    _assert_exact(tmp_path / "output", _expected(files))


def _delta_rows(path: Path) -> pd.DataFrame:
    """The Delta table as delta-rs reads it, in read_sink's layout."""
    frame = DeltaTable(str(path)).to_pandas()
    for column in ("windowStart", "windowEnd", "firstEventTime", "lastEventTime"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame.sort_values(["user", "windowStart"]).reset_index(drop=True)


@pytest.mark.parametrize("sink", ["parquet", "delta"])
def test_kafka_over_connect_equals_the_oracle_without_a_jvm_here(
    connect_server: ConnectServer, kafka_broker: KafkaBroker, tmp_path: Path, sink: str
) -> None:
    """A Kafka source over Connect into Parquet and into Delta: the topic's offsets come from librdkafka in the
    client (no JVM here for Kafka's Java admin client), the stream runs on the server; a second run after more
    records lands exactly the rest (against the oracle; Delta read with delta-rs)."""
    topic = f"connect-clicks-{sink}"
    kafka_broker.create_topic(topic, partitions=2)
    events = make_events(240, keys=3, seed=36)
    produced = produce(kafka_broker, topic, events[:160])
    source = {"format": "kafka", "path": None, "max_files_per_trigger": None}
    config = write_config(
        tmp_path,
        source={**source, "bootstrap_servers": kafka_broker.bootstrap, "topic": topic},
        sink={"format": sink, "path": "output"},
    )
    first = _tidemark(["run", str(config)], _env(connect_server))
    assert first.returncode == 0, first.stderr[-3000:]
    produced += produce(kafka_broker, topic, events[160:])
    second = _tidemark(["run", str(config)], _env(connect_server))
    assert second.returncode == 0, second.stderr[-3000:]
    actual = read_sink(tmp_path / "output") if sink == "parquet" else _delta_rows(tmp_path / "output")
    assert_matches_oracle(actual, final_windows_oracle(produced))
