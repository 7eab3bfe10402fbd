"""The Delta sink on cloud storage (#38): Spark writes the table and the checkpoint on wasbs:// (Azurite, hadoop-azure's
emulator mode, through the proxy on port 10000) and s3a:// (moto, through a proxy), on this environment's Spark
line (the default, 4.1: the line with both WASB and a Delta release; Delta on abfs://, the only Azure scheme of
4.2/4.3, is the smoke feature `delta abfs`, tests/smoke/test_smoke.py, run on 4.1 and 4.2). A run is killed right
after a batch's Delta commit and before Spark's `commits/<n>`, a rerun finishes;
the table, copied off the server file by file and read with delta-rs (not tidemark), equals the pandas oracle with
nothing twice; `audit` and `checkpoint inspect --sink` read the table's log there. Then `recover --to-batch 1` and a
rerun, and the checkpoint deleted on the server and the run recovering by itself: exact each time.
"""

from __future__ import annotations

import json
from pathlib import Path

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


@pytest.mark.parametrize("kind", ["wasb", "s3a"])
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
