"""Issue 27: what object storage does to a running pipeline, with Spark itself writing there.

A SIGKILL of the driver the moment it PUTs `commits/<n>` (the proxy fires it, so the commit never lands), then a
restart: exact output, no (key, window) twice in the raw Parquet. The storage server gone for 30 s mid-run: the
run rides it out or stops with one line, and a rerun ends exact. 503 on 10% of requests plus latency: exact.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fault_proxy import Request
from tests.oracles import assert_matches_oracle, window_oracle
from tests.servers import SparkStore
from tests.storage.spark_stores import (
    FAST_WASB_RETRIES,
    WATERMARK,
    WINDOW,
    cloud_config,
    delete_tree,
    events,
    oracle,
    raw_sink,
)
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.errors import TidemarkError
from tidemark.pipeline.run import run_pipeline
from tidemark.recovery.failover import Failover
from tidemark.storage import open_storage

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _store(request: pytest.FixtureRequest, kind: str, monkeypatch: pytest.MonkeyPatch) -> SparkStore:
    """The store's fixture, its credentials set for this test: each module-scoped store fixture sets its own and
    clears the others' (tests/servers.py), so in a module using both, the one set up last would win."""
    store: SparkStore = request.getfixturevalue(f"{kind}_store")
    for name, value in store.env.items():
        monkeypatch.setenv(name, value)
    return store


@pytest.mark.reliability(fault="driver kill", storage="azure wasbs", sink="parquet")
@pytest.mark.reliability(fault="checkpoint lost + recover", storage="azure wasbs", sink="parquet")
def test_driver_killed_while_it_puts_a_commit_then_restarted_is_exact(
    spark: Any, wasb_store: SparkStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = wasb_store.new_root()
    # Three files: the kill lands on commits/1, after batch 1 put its windows in the sink and its sink log entry on
    # the server. The restart runs batch 1 again, where Spark's file sink skips a batch its log already holds
    # without running the plan (no duplicate), so that rerun moves no watermark: file 3's batch and the no-data
    # batch after it close the remaining windows. (Killed on the commit of the LAST data batch, an available-now
    # restart ends with the later windows still in state, waiting for data: Spark's semantics, not a loss, but
    # not what an oracle of closed windows expects.)
    data = events(tmp_path, files=4)
    late = tmp_path / "staged" / data.files[3].name  # lands once the checkpoint is lost (below)
    late.parent.mkdir()
    data.files[3].rename(late)
    config_path = cloud_config(tmp_path, root)
    killed: list[Request] = []
    driver: dict[str, subprocess.Popen[bytes]] = {}

    def kill(request: Request) -> bool:
        if not killed:
            killed.append(request)
            os.killpg(driver["run"].pid, signal.SIGKILL)
        return True  # the commit never reaches the server

    wasb_store.proxy.on("PUT", r"/job/checkpoint/commits/1$", kill)
    command = [sys.executable, "-m", "tidemark.cli.main", "run", str(config_path), "--available-now"]
    with (tmp_path / "killed.log").open("wb") as log:
        driver["run"] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ}
        )
        code = driver["run"].wait(timeout=600)
    wasb_store.proxy.clear_hooks()
    assert killed, (tmp_path / "killed.log").read_text()[-3000:]
    assert code == -signal.SIGKILL
    on_server = {e.rel for e in open_storage(f"{root}/checkpoint").list_files()}
    assert "offsets/1" in on_server and "commits/0" in on_server and "commits/1" not in on_server

    # The killed run's lock (a blob lease) would outlive it by up to 35 s; its holder is dead on this host, so the
    # restart breaks the lease and runs at once.
    result = run_pipeline(load_config(config_path), spark=spark, available_now=True, prestarts=[Failover()])
    assert result.first_batch == 1  # batch 1 ran again
    expected = window_oracle([[f] for f in data.files[:3]], window=WINDOW, watermark=WATERMARK)
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "raw"), expected)

    # Then the checkpoint is lost on the server (every blob under it), a fourth file lands: `recover --apply`
    # continues exactly once there.
    delete_tree(f"{root}/checkpoint")
    assert not open_storage(f"{root}/checkpoint").exists("")
    late.rename(tmp_path / "landing" / late.name)
    capsys.readouterr()
    assert main(["recover", str(config_path), "--apply"]) == 0, capsys.readouterr().err[-3000:]
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "raw-after"), oracle(data))


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(
            "wasb",
            marks=pytest.mark.reliability(fault="storage unreachable 30 s", storage="azure wasbs", sink="parquet"),
        ),
        pytest.param(
            "s3a", marks=pytest.mark.reliability(fault="storage unreachable 30 s", storage="s3 (moto)", sink="parquet")
        ),
    ],
)
def test_storage_gone_for_30_seconds_mid_run_then_a_rerun_is_exact(
    spark: Any, kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(request, kind, monkeypatch)
    root = store.new_root()
    data = events(tmp_path, files=2)
    config = load_config(cloud_config(tmp_path, root, spark={"conf": FAST_WASB_RETRIES}))
    went_down = threading.Event()

    def outage(request: Request) -> bool:
        if not went_down.is_set():
            went_down.set()
            store.proxy.down(30)
            return True
        return False

    store.proxy.on("PUT", r"/job/checkpoint/commits/1$", outage)
    started = time.monotonic()
    try:
        first = run_pipeline(config, spark=spark, available_now=True, prestarts=[Failover()])
        outcome = f"rode it out: {first.batches} batches"
    except TidemarkError as exc:
        outcome = str(exc)
        assert "\n" not in outcome
    assert went_down.is_set(), outcome
    assert time.monotonic() - started >= 30 or "rode it out" not in outcome
    store.proxy.clear_hooks()
    run_pipeline(config, spark=spark, available_now=True, prestarts=[Failover()])
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "raw"), oracle(data))


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("wasb", marks=pytest.mark.reliability(fault="10% 503s", storage="azure wasbs", sink="parquet")),
        pytest.param("s3a", marks=pytest.mark.reliability(fault="10% 503s", storage="s3 (moto)", sink="parquet")),
    ],
)
def test_503_on_a_tenth_of_requests_with_latency_is_exact(
    spark: Any, kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(request, kind, monkeypatch)
    root = store.new_root()
    data = events(tmp_path, files=2)
    config = load_config(cloud_config(tmp_path, root, spark={"conf": FAST_WASB_RETRIES}))
    store.proxy.latency = 0.005
    store.proxy.error_rate = 0.10
    try:
        run_pipeline(config, spark=spark, available_now=True, prestarts=[Failover()])
        assert store.proxy.errors > 10
    finally:
        store.calm()
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "raw"), oracle(data))
