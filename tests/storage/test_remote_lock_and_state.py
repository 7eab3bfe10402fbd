"""The run lock on each store (a blob lease on Azure, a conditional write on S3), and the state readers on a
checkpoint that lives on Azurite: only the needed files are fetched, and the answers equal the local ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.servers import Azurite
from tests.storage.test_remote_checkpoints import upload
from tests.streaming_queries import ROCKSDB, run_query, windowed, write_input
from tidemark.errors import CheckpointLocked
from tidemark.formats import LOCK_FILE, RunLock, read_lock
from tidemark.session import runtime_conf
from tidemark.statestore.stats import state_stats
from tidemark.storage import open_storage


def test_the_run_lock_refuses_a_second_run_on_every_store(store_root: str) -> None:
    checkpoint = f"{store_root}/ck"
    # A lock is stale after 3 missed heartbeats: at 0.2 s a busy 2-core machine talking to moto missed them (CI,
    # 2026-11-28: "replacing a stale lock", the second run took it). At 1 s the first run's lock stays fresh.
    with RunLock(checkpoint, "run-1", heartbeat_seconds=1.0):
        info = read_lock(checkpoint)
        assert info is not None and info.run_id == "run-1"
        with pytest.raises(CheckpointLocked, match="run-1"), RunLock(checkpoint, "run-2"):
            pass
    assert read_lock(checkpoint) is None
    with RunLock(checkpoint, "run-3"):  # released: the next run takes it
        info = read_lock(checkpoint)
        assert info is not None and info.run_id == "run-3"


def test_a_leased_lock_blob_cannot_be_overwritten_by_another_writer(azure_env: Azurite) -> None:
    from azure.core.exceptions import HttpResponseError

    container = azure_env.new_container()
    checkpoint = azure_env.uri(container, "ck")
    blob = azure_env.service().get_blob_client(container, f"ck/{LOCK_FILE}")
    with RunLock(checkpoint, "run-1"):
        with pytest.raises(HttpResponseError):  # no lease id: the service refuses the write
            blob.upload_blob(b'{"run_id": "intruder"}', overwrite=True)
        info = read_lock(checkpoint)
        assert info is not None and info.run_id == "run-1"


@pytest.mark.integration
def test_state_stats_on_azurite_fetch_only_what_they_need(
    spark: Any, azure_env: Azurite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEMARK_CACHE_DIR", str(tmp_path / "cache"))
    conf = (ROCKSDB, "true", "1", "true")
    write_input(tmp_path / "in", range(4))
    run_query(spark, tmp_path / "in", windowed, tmp_path / "ck", tmp_path / "out", conf)
    uri = azure_env.uri(azure_env.new_container(), "ck")
    total = upload(tmp_path / "ck", uri)
    local = state_stats(str(tmp_path / "ck"))
    remote = state_stats(uri)
    assert remote.fetched is not None and 0 < remote.fetched.files < total
    assert remote.fetched.bytes_fetched > 0
    assert remote.batch == local.batch
    strip = ("checkpoint", "fetched")
    mine = {k: v for k, v in dataclasses.asdict(remote).items() if k not in strip}
    theirs = {k: v for k, v in dataclasses.asdict(local).items() if k not in strip}
    assert mine == theirs
    again = state_stats(uri)  # the cache: nothing new to fetch
    assert again.fetched is not None and again.fetched.bytes_fetched == 0
    # The same URI now holds another checkpoint (as after `state repartition` in place, or a checkpoint deleted
    # and started again): other partitions, files of the same names. The answer is the new checkpoint's, not a mix.
    with runtime_conf(spark, {"spark.sql.shuffle.partitions": "3"}):
        write_input(tmp_path / "in2", range(3))
        run_query(spark, tmp_path / "in2", windowed, tmp_path / "ck2", tmp_path / "out2", conf)
    store = open_storage(uri)
    store.delete_files([e.rel for e in store.list_files()])
    upload(tmp_path / "ck2", uri)
    local2 = state_stats(str(tmp_path / "ck2"))
    remote2 = state_stats(uri)
    mine = {k: v for k, v in dataclasses.asdict(remote2).items() if k not in strip}
    theirs = {k: v for k, v in dataclasses.asdict(local2).items() if k not in strip}
    assert mine == theirs
    assert {len(o.partitions) for o in remote2.operators} == {3} != {len(o.partitions) for o in remote.operators}


_DIES_HOLDING = """
import os, sys, time
from tidemark.formats import RunLock
lock = RunLock(sys.argv[1], "killed-run", heartbeat_seconds=10.0).__enter__()
print("held", flush=True)
os.kill(os.getpid(), 9)
"""


def test_a_lease_whose_holder_died_on_this_host_is_broken_at_once(azure_env: Azurite) -> None:
    """A killed run leaves its lease for up to a minute; its restart on the same host takes the lock at once, and
    a holder that is alive keeps it."""
    import subprocess
    import sys
    import time

    checkpoint = azure_env.uri(azure_env.new_container(), "ck")
    died = subprocess.run(
        [sys.executable, "-c", _DIES_HOLDING, checkpoint], capture_output=True, text=True, check=False
    )
    assert died.returncode == -9 and "held" in died.stdout, died.stderr[-2000:]
    held = read_lock(checkpoint)
    assert held is not None and held.run_id == "killed-run"
    started = time.monotonic()
    with RunLock(checkpoint, "restart"):
        assert time.monotonic() - started < 10  # the lease lasts 35 s: it was broken, not waited out
        info = read_lock(checkpoint)
        assert info is not None and info.run_id == "restart"
        with pytest.raises(CheckpointLocked, match="restart"), RunLock(checkpoint, "third"):
            pass  # a live holder's lease is never broken
    assert read_lock(checkpoint) is None
