"""The Delta sink on cloud storage (#38): Spark writes the table and the checkpoint on wasbs:// (Azurite, hadoop-azure's
emulator mode, through the proxy on port 10000) and s3a:// (moto, through a proxy), on this environment's Spark
line (the default, 4.1: the line with both WASB and a Delta release; Delta on abfs://, the only Azure scheme of
4.2/4.3, is the smoke feature `delta abfs`, tests/smoke/test_smoke.py, run on 4.1 and 4.2). A run is killed right
after a batch's Delta commit and before Spark's `commits/<n>`, a rerun finishes;
the table, copied off the server file by file and read with delta-rs (not tidemark), equals the pandas oracle with
nothing twice; `audit` and `checkpoint inspect --sink` read the table's log there. Then `recover --to-batch 1` and a
rerun, and the checkpoint deleted on the server and the run recovering by itself: exact each time. Then both stores
at once through their fault proxies: 503s on a tenth of the requests and a 30 s outage (docs/reliability.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from deltalake import DeltaTable

from tests.integration.test_delta_sink import KEY, _assert_exact, _cli, _run
from tests.servers import SparkStore
from tests.storage.spark_stores import cloud_config, delete_tree, events, oracle
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.formats import read_sink_transaction
from tidemark.recovery.audit import audit_sink
from tidemark.storage import open_storage

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _copy_table(uri: str, into: Path) -> Path:
    """Every object of the table (its _delta_log and data files) copied to a local folder, as the server has it."""
    store = open_storage(uri)
    names = [e.rel for e in store.list_files()]
    assert any(n.startswith("_delta_log/") for n in names), names
    for rel in names:
        target = into / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        store.download(rel, str(target))
    return into


def _cells(storage: str) -> list[pytest.MarkDecorator]:
    """The fault-matrix cells a store's case proves: the kill after Delta's commit, the checkpoint deleted there."""
    return [
        pytest.mark.reliability(fault="driver kill", storage=storage, sink="delta"),
        pytest.mark.reliability(fault="checkpoint lost + recover", storage=storage, sink="delta"),
    ]


@pytest.mark.parametrize(
    "kind", [pytest.param("wasb", marks=_cells("azure wasbs")), pytest.param("s3a", marks=_cells("s3 (moto)"))]
)
def test_delta_sink_on_a_store_is_exact_through_a_kill_and_audit_reads_it_there(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store: SparkStore = request.getfixturevalue(f"{kind}_store")
    data = events(tmp_path, files=3)  # three batches and the no-data one: each costs seconds on a store
    files = list(data.files)
    staged = tmp_path / "staged"
    staged.mkdir()
    for file in files[2:]:  # the last file arrives after the kill
        file.rename(staged / file.name)
    root = store.new_root()
    config = cloud_config(
        tmp_path, root, sink={"format": "delta", "path": f"{root}/output"}, checkpoint={"on_missing": "recover"}
    )

    killed = _run(config, kill_after_batch=1)
    assert killed.returncode == -9, killed.stderr[-2000:]
    checkpoint = open_storage(f"{root}/checkpoint")
    assert {e.rel for e in checkpoint.list_files() if e.rel.startswith("commits/")} == {"commits/0"}
    for name in [f.name for f in files[2:]]:
        (staged / name).rename(tmp_path / "landing" / name)
    done = _run(config)
    assert done.returncode == 0, done.stderr[-2000:]
    assert store.proxy.counts["write"] > 0  # Spark's requests went through the proxy to the server

    local = _copy_table(f"{root}/output", tmp_path / "copy")
    _assert_exact(local, oracle(data))
    table = DeltaTable(str(local))

    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
    assert audit.data_files == len(table.file_uris())
    assert sum(r.rows or 0 for r in audit.batches) == len(oracle(data))
    assert all(r.in_sink_log for r in audit.batches)

    assert main(["checkpoint", "inspect", f"{root}/checkpoint", "--sink", f"{root}/output", "--json"]) == 0
    delta = json.loads(capsys.readouterr().out)["sink"]
    assert (delta["version"], delta["files"]) == (table.version(), len(table.file_uris()))
    assert delta["last_batch"] == max(r.batch for r in audit.batches)
    frame: pd.DataFrame = table.to_pandas()
    assert delta["rows"] == len(frame) and not frame.duplicated(KEY).any()

    # Rolled back to batch 1 there: Delta's RESTORE (one commit, written put-if-absent on the server) removes the
    # later batches' files and sets the transaction back; the checkpoint's later files move aside on the server.
    # In its own process, as users run it: delta-rs' RESTORE holds the GIL while it talks to the store, and the
    # tests' proxy serves the store from this process's threads.
    done_back = _cli(["recover", str(config), "--to-batch", "1", "--apply", "--json"])
    assert done_back.returncode == 0, done_back.stderr[-3000:]
    rolled = json.loads(done_back.stdout)
    undo = rolled["plan"]["sink_undo"]["undo"]  # the sink's own undo commit (a file sink's moves are in "moves")
    undone_files = [f for c in undo["undone"] for f in c["files"]]
    assert undo["undone"] and undo["restore_version"] is not None
    assert max(int(e.rel.split("/")[1]) for e in checkpoint.list_files() if e.rel.startswith("commits/")) == 1
    back = DeltaTable(str(_copy_table(f"{root}/output", tmp_path / "copy-2")))
    transaction = read_sink_transaction(checkpoint)
    assert transaction is not None and back.version() == table.version() + 1
    assert back.transaction_version(transaction.app_id) == transaction.version_of(1)
    assert len(back.file_uris()) == len(table.file_uris()) - len(undone_files)
    assert back.history(1)[0]["operation"] == "RESTORE"

    # Then the checkpoint lost on the server: the run recovers by itself (on_missing = "recover"), replaying what the
    # rolled-back table lacks: exact again (the local tests run the rollback's own rerun).
    delete_tree(f"{root}/checkpoint")
    assert not checkpoint.exists("")
    recovered = _run(config)
    assert recovered.returncode == 0, recovered.stderr[-2000:]
    _assert_exact(_copy_table(f"{root}/output", tmp_path / "copy-3"), oracle(data))
    assert audit_sink(load_config(config)).ok


@pytest.mark.reliability(fault="10% 503s", storage="azure wasbs", sink="delta")
@pytest.mark.reliability(fault="storage unreachable 30 s", storage="azure wasbs", sink="delta")
@pytest.mark.reliability(fault="10% 503s", storage="s3 (moto)", sink="delta")
@pytest.mark.reliability(fault="storage unreachable 30 s", storage="s3 (moto)", sink="delta")
def test_delta_sink_through_503s_and_a_30_second_outage_is_exact(
    wasb_store: SparkStore, s3a_store: SparkStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Delta sink on wasbs:// and on s3a:// at once, each `tidemark run` in its own JVM (Delta's jars), both
    through their fault proxy: a tenth of the requests answered 503 with latency on the rest for the whole run, and
    the store unreachable for 30 s from the PUT of `commits/1` (which never lands). A run rides the outage out or stops
    with one line; a rerun (503s still on) then finishes. The two runs go side by side, so their outages overlap.
    Each table, copied off the server and read with delta-rs, equals the pandas oracle with nothing twice."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    from tests.storage.spark_stores import FAST_WASB_RETRIES

    stores = {"wasb": wasb_store, "s3a": s3a_store}
    for store in stores.values():  # both stores' credentials here (each fixture set only its own)
        for name, value in store.env.items():
            monkeypatch.setenv(name, value)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    started, runs = time.monotonic(), {}
    for kind, store in stores.items():
        folder = tmp_path / kind
        folder.mkdir()
        data = events(folder, files=3)
        root = store.new_root()
        sink = {"format": "delta", "path": f"{root}/output"}
        config = cloud_config(folder, root, sink=sink, spark={"conf": FAST_WASB_RETRIES})
        went_down = threading.Event()

        def outage(request: Any, store: SparkStore = store, went_down: threading.Event = went_down) -> bool:
            if went_down.is_set():
                return False
            went_down.set()
            store.proxy.down(30)
            return True

        store.proxy.on("PUT", r"/job/checkpoint/commits/1$", outage)
        store.proxy.latency, store.proxy.error_rate = 0.005, 0.10
        command = [sys.executable, "-m", "tidemark.cli.main", "run", str(config), "--available-now"]
        with (folder / "run.log").open("wb") as log:  # a file, not a pipe: nobody reads one run while the other ends
            process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        runs[kind] = (store, data, root, config, went_down, process)
    try:
        for kind, (store, data, root, config, went_down, process) in runs.items():
            process.wait(timeout=500)
            stderr = (tmp_path / kind / "run.log").read_text(errors="replace")
            assert went_down.is_set(), f"{kind}: the outage never came: {stderr[-3000:]}"
            if process.returncode != 0:  # stopped by the outage: in one line, then a rerun finishes
                errors = [line for line in stderr.splitlines() if line.startswith("error:")]
                assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
                print(f"{kind}: stopped after {time.monotonic() - started:.0f} s: {errors[0]}")
                store.proxy.clear_hooks()
                done = _run(config)
                assert done.returncode == 0, done.stderr[-3000:]
            else:
                assert time.monotonic() - started >= 30, f"{kind}: rode out an outage shorter than 30 s"
            assert store.proxy.errors > 10, f"{kind}: only {store.proxy.errors} 503s"
            store.calm()
            _assert_exact(_copy_table(f"{root}/output", tmp_path / f"{kind}-copy"), oracle(data))
    finally:
        for store, *_, process in runs.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)  # Python and its JVM
                process.wait(timeout=60)
            store.calm()
