"""Issue 27: `tidemark run` (the CLI, its own JVM) with checkpoint and sink on abfs:// against Azurite.

Azurite has no DFS endpoint, but Hadoop 3.4.2's ABFS can work over the Blob endpoint for accounts without a
hierarchical namespace (HADOOP-19226), and reaches an emulator through `fs.azure.abfs.endpoint`: tidemark
maps the connection string to those settings and the account key. The Azurite here keeps its metadata in MariaDB
(tests/mariadb.py, issue 39). The key is never printed (not even with
--debug), never in Spark's event log (redacted), never on the server, never in the working folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mariadb import SqlAzurite
from tests.oracles import assert_matches_oracle
from tests.servers import SparkStore
from tests.storage.spark_stores import cloud_config, events, oracle, raw_sink
from tidemark.cli.main import main
from tidemark.storage import open_storage

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_run_on_abfs_over_the_blob_endpoint_and_the_key_is_nowhere(
    abfs_store: SparkStore, sql_azurite: SqlAzurite, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = abfs_store.new_root()
    data = events(tmp_path, files=2)
    event_log = tmp_path / "events"
    event_log.mkdir()
    config = cloud_config(
        tmp_path,
        root,
        spark={
            "conf": {
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": f"file://{event_log}",
                "spark.eventLog.compress": "false",
            }
        },
    )
    work = tmp_path / "cwd"
    work.mkdir()
    key = abfs_store.env["AZURE_STORAGE_CONNECTION_STRING"].split("AccountKey=")[1].split(";")[0]
    done = subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", "--debug", "run", str(config), "--available-now"],
        cwd=work,
        env={**os.environ, **abfs_store.env},
        capture_output=True,
        timeout=600,
        check=False,
    )
    output = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, output[-3000:]
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "raw"), oracle(data))
    assert {"metadata", "commits/0"} <= {e.rel for e in open_storage(f"{root}/checkpoint").list_files()}

    assert key not in output
    logs = [p for p in event_log.rglob("*") if p.is_file()]
    assert logs
    text = "".join(p.read_text(encoding="utf-8", errors="replace") for p in logs)
    assert "fs.azure.account.key.devstoreaccount1.dfs.core.windows.net" in text  # the setting was there...
    assert key not in text  # ...and redacted
    store = open_storage(root)
    for entry in store.list_files():
        data_bytes = store.read_bytes(entry.rel) or b""
        assert key.encode() not in data_bytes, entry.rel
    assert list(work.iterdir()) == []

    # That Azurite keeps its metadata in MariaDB (issue 39): every blob Spark left is a row there, and tidemark's
    # own commands read the checkpoint and the sink through it.
    assert sql_azurite.blob_rows() >= len(list(store.list_files())) > 0
    assert main(["checkpoint", "inspect", f"{root}/checkpoint", "--sink", f"{root}/output", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    commits = [e.rel.rsplit("/", 1)[-1] for e in store.list_files("checkpoint/commits")]
    assert report["latest_committed_batch"] == max(int(name) for name in commits if name.isdigit())
    assert main(["audit", str(config)]) == 0, capsys.readouterr()
